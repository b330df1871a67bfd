<?php
// SPDX-License-Identifier: MIT
// Symfony Lock 5.4 (Debian php-symfony-lock) peer: N uncontended acquire()+release() pairs on one
// lock object, the way Symfony's documentation uses the component. Prints one JSON line.
//
//   php bench/peers/symfony_lock.php STORE PAIRS [WARMUP]
//     STORE: redis (needs php-redis)       endpoint LOCKSMITH_TEST_REDIS_URL (redis://host:port[/db])
//            memcached (php-memcached)      endpoint LOCKSMITH_TEST_MEMCACHED (host:port)
//            flock | semaphore | memory     FlockStore / SemaphoreStore / InMemoryStore
//            postgresql (php-pgsql)         PostgreSqlStore (advisory locks), LOCKSMITH_TEST_POSTGRES_DSN
//            pdo-pgsql | pdo-mysql          PdoStore on LOCKSMITH_TEST_POSTGRES_DSN / _MARIADB_DSN
//            pdo-sqlite (php-sqlite3)       PdoStore on a SQLite file in the temporary folder
//   WARMUP: untimed pairs first (default 50; PdoStore on SQLite makes ≈ 20 pairs/s, so give few)
//
//   php bench/peers/symfony_lock.php STORE --contended NAME START SECONDS HOLD_US
//     One of several processes on one lock NAME: from the wall-clock time START (seconds since
//     the epoch, so that all begin together) for SECONDS, blocking acquire(true), HOLD_US of busy
//     work, release(). Prints the pairs this process made. Symfony's blocking acquire() on a
//     store that cannot wait (RedisStore, MemcachedStore, PdoStore) retries every 100 ms ± 10.
require '/usr/share/php/Symfony/Component/Lock/autoload.php';

use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store;

// A scripts/services.sh URL (scheme://user[:password]@host:port/db) as a PDO DSN and its login.
function pdo_from_url(string $variable, string $driver): array {
    $url = parse_url(getenv($variable) ?: '');
    if (!isset($url['host'])) { fwrite(STDERR, "symfony_lock.php: $variable is unset\n"); exit(64); }
    $dsn = sprintf('%s:host=%s;port=%d;dbname=%s', $driver, $url['host'], $url['port'],
                   ltrim($url['path'] ?? '', '/'));
    return [$dsn, ['db_username' => $url['user'] ?? null, 'db_password' => $url['pass'] ?? null]];
}

$kind = $argv[1] ?? 'redis';
$contended = ($argv[2] ?? '') === '--contended';
$pairs = $contended ? 0 : max(1, min(10000000, (int)($argv[2] ?? 5000)));
$warmup = $contended ? 0 : max(0, min(10000, (int)($argv[3] ?? 50)));

switch ($kind) {
    case 'redis':
        $url = parse_url(getenv('LOCKSMITH_TEST_REDIS_URL') ?: 'redis://127.0.0.1:16379');
        $redis = new Redis();
        $redis->connect($url['host'] ?? '127.0.0.1', $url['port'] ?? 6379, 2.0);
        if (isset($url['path']) && strlen($url['path']) > 1) $redis->select((int)substr($url['path'], 1));
        $store = new Store\RedisStore($redis);
        break;
    case 'memcached':
        [$host, $port] = explode(':', getenv('LOCKSMITH_TEST_MEMCACHED') ?: '127.0.0.1:21211') + [1 => 11211];
        $mc = new Memcached();
        $mc->addServer($host, (int)$port);
        $store = new Store\MemcachedStore($mc);
        break;
    case 'flock':
        // Contended runs share one folder (the harness removes it afterwards).
        $dir = sys_get_temp_dir() . '/locksmith-bench-symfony-' . ($contended ? 'contended' : getmypid());
        @mkdir($dir, 0700);
        $store = new Store\FlockStore($dir);
        break;
    case 'semaphore':
        $store = new Store\SemaphoreStore();
        break;
    case 'memory':
        $store = new Store\InMemoryStore();
        break;
    case 'postgresql':
        [$dsn, $login] = pdo_from_url('LOCKSMITH_TEST_POSTGRES_DSN', 'pgsql');
        $store = new Store\PostgreSqlStore($dsn, $login);
        break;
    case 'pdo-pgsql':
    case 'pdo-mysql':
        [$dsn, $login] = $kind === 'pdo-pgsql'
            ? pdo_from_url('LOCKSMITH_TEST_POSTGRES_DSN', 'pgsql')
            : pdo_from_url('LOCKSMITH_TEST_MARIADB_DSN', 'mysql');
        $store = new Store\PdoStore($dsn, $login + ['db_table' => 'symfony_bench_keys']);
        try { $store->createTable(); } catch (\PDOException $e) { /* exists already */ }
        break;
    case 'pdo-sqlite':
        $file = sys_get_temp_dir() . '/locksmith-bench-symfony-' . getmypid() . '.db';
        $store = new Store\PdoStore('sqlite:' . $file);
        $store->createTable();
        break;
    default:
        fwrite(STDERR, "symfony_lock.php: unknown store $kind\n");
        exit(64);
}

$factory = new LockFactory($store);
if ($contended) {
    [$name, $start, $seconds, $hold_ns] =
        [$argv[3], (float)$argv[4], (float)$argv[5], 1000 * (int)$argv[6]];
    $lock = $factory->createLock($name, 30.0);
    time_sleep_until(max($start, microtime(true) + 0.001));
    $end = $start + $seconds;
    $made = 0;
    while (microtime(true) < $end) {
        $lock->acquire(true);
        $until = hrtime(true) + $hold_ns;
        while (hrtime(true) < $until) {}
        $lock->release();
        ++$made;
    }
    echo json_encode(['peer' => "symfony-$kind", 'pairs' => $made,
                      'seconds' => microtime(true) - $start]), "\n";
    exit(0);
}
$lock = $factory->createLock('locksmith-bench-symfony-' . getmypid(), 30.0);

// Warm-up (autoloading, connection), not timed.
for ($i = 0; $i < $warmup; ++$i) { $lock->acquire(); $lock->release(); }

$t0 = hrtime(true);
for ($i = 0; $i < $pairs; ++$i) {
    if (!$lock->acquire()) { fwrite(STDERR, "acquire failed\n"); exit(1); }
    $lock->release();
}
$s = (hrtime(true) - $t0) / 1e9;
if (isset($file)) @unlink($file);
if (isset($dir)) { foreach (glob("$dir/*") as $f) @unlink($f); @rmdir($dir); }
echo json_encode(['peer' => "symfony-$kind", 'pairs' => $pairs, 'seconds' => $s,
                  'pairs_per_s' => $pairs / $s]), "\n";
