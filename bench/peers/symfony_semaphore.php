<?php
// SPDX-License-Identifier: MIT
// Symfony Semaphore 5.4 (Debian php-symfony-semaphore, php-redis) peer of locksmith's redis
// permits: its RedisStore keeps the holders in a sorted set by expiry, as locksmith's does.
// Prints one JSON line.
//
//   php bench/peers/symfony_semaphore.php LIMIT PAIRS [WARMUP]
//     PAIRS uncontended acquire()+release() pairs on one semaphore of LIMIT (every acquire finds
//     a permit free), after WARMUP untimed ones (default 50).
//
//   php bench/peers/symfony_semaphore.php LIMIT --contended NAME START SECONDS HOLD_MS
//     One of several processes on one semaphore NAME of LIMIT: from the wall-clock time START
//     (seconds since the epoch) for SECONDS, acquire, HOLD_MS of sleep, release. Symfony's
//     acquire() never waits (the component has no blocking acquire): a refused one is retried
//     after 5 ms. Prints the grants this process made.
//
// Endpoint: LOCKSMITH_TEST_REDIS_URL (redis://host:port[/db]).
require '/usr/share/php/Symfony/Component/Semaphore/autoload.php';

use Symfony\Component\Semaphore\SemaphoreFactory;
use Symfony\Component\Semaphore\Store\RedisStore;

$limit = max(1, (int)($argv[1] ?? 1));
$contended = ($argv[2] ?? '') === '--contended';
$url = parse_url(getenv('LOCKSMITH_TEST_REDIS_URL') ?: 'redis://127.0.0.1:16379');
$redis = new Redis();
$redis->connect($url['host'] ?? '127.0.0.1', $url['port'] ?? 6379, 2.0);
if (isset($url['path']) && strlen($url['path']) > 1) $redis->select((int)substr($url['path'], 1));
$factory = new SemaphoreFactory(new RedisStore($redis));

if ($contended) {
    [$name, $start, $seconds, $hold_us] =
        [$argv[3], (float)$argv[4], (float)$argv[5], 1000 * (int)$argv[6]];
    $semaphore = $factory->createSemaphore($name, $limit, 1, 30.0);
    time_sleep_until(max($start, microtime(true) + 0.001));
    $end = $start + $seconds;
    $made = 0;
    while (microtime(true) < $end) {
        while (!$semaphore->acquire()) usleep(5000);
        usleep($hold_us);
        $semaphore->release();
        ++$made;
    }
    // One write: the processes append to one file.
    echo json_encode(['peer' => "symfony-semaphore-$limit", 'pairs' => $made,
                      'seconds' => microtime(true) - $start]) . "\n";
    exit(0);
}

$pairs = max(1, min(10000000, (int)($argv[2] ?? 5000)));
$warmup = max(0, min(10000, (int)($argv[3] ?? 50)));
$semaphore = $factory->createSemaphore('locksmith-bench-symfony-sem-' . getmypid(), $limit, 1, 30.0);
for ($i = 0; $i < $warmup; ++$i) { $semaphore->acquire(); $semaphore->release(); }
$t0 = hrtime(true);
for ($i = 0; $i < $pairs; ++$i) {
    if (!$semaphore->acquire()) { fwrite(STDERR, "acquire refused\n"); exit(1); }
    $semaphore->release();
}
$s = (hrtime(true) - $t0) / 1e9;
echo json_encode(['peer' => "symfony-semaphore-$limit", 'pairs' => $pairs, 'seconds' => $s,
                  'pairs_per_s' => $pairs / $s]), "\n";
