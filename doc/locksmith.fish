# SPDX-License-Identifier: MIT
# fish completion for locksmith(1). Installed as share/fish/vendor_completions.d/locksmith.fish.
# tests/cli/cli_manual_test.cpp checks that each command's options here (the -s, -l and -o of
# the lines under `__locksmith_in COMMAND`, and of `__fish_use_subcommand` for the global ones)
# are exactly those its --help lists.

complete -c locksmith -f

# True when the command line's command is $argv[1] (for config: its subcommand too).
function __locksmith_in
    set -l words (commandline -opc)
    set -l command
    set -l skip 0
    for word in $words[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $word
            case --config
                set skip 1
            case '-*'
            case '*'
                set command $command $word
        end
    end
    test "$command[1]" = $argv[1]; or return 1
    test (count $argv) -lt 2; or test "$command[2]" = $argv[2]
end

function __locksmith_strategy_names
    locksmith strategies 2>/dev/null | awk 'listing && NF == 0 { exit }
        listing { print $1 } /^NAME / { listing = 1 }'
end

set -l __locksmith_capabilities exclusive shared noblock native_wait expiring distributed serializable crash_release fencing fair consensus

# Global options and the commands.
complete -c locksmith -n __fish_use_subcommand -s h -l help -d 'Show help'
complete -c locksmith -n __fish_use_subcommand -l version -d 'Version, plugin API and strategies'
complete -c locksmith -n __fish_use_subcommand -l config -r -F -d 'Configuration file'
complete -c locksmith -n __fish_use_subcommand -a run -d 'Run a command under a lock'
complete -c locksmith -n __fish_use_subcommand -a hold -d 'Hold a lock until stdin closes'
complete -c locksmith -n __fish_use_subcommand -a strategies -d 'List the strategies'
complete -c locksmith -n __fish_use_subcommand -a explain -d 'Which strategy a lock would use'
complete -c locksmith -n __fish_use_subcommand -a config -d 'Configuration files'
complete -c locksmith -n __fish_use_subcommand -a status -d 'Whether a lock is held'

# run and hold take the same options; run also a shell command.
for command in run hold
    complete -c locksmith -n "__locksmith_in $command" -s h -l help -d 'Show help'
    complete -c locksmith -n "__locksmith_in $command" -s x -s e -l exclusive -d 'Exclusive lock'
    complete -c locksmith -n "__locksmith_in $command" -s s -l shared -d 'Shared lock'
    complete -c locksmith -n "__locksmith_in $command" -s n -l nonblock -l no-wait -d 'Do not wait'
    complete -c locksmith -n "__locksmith_in $command" -s w -l wait -l timeout -x -d 'Wait at most SECONDS'
    complete -c locksmith -n "__locksmith_in $command" -s E -l conflict-exit-code -x -d 'Exit code when held'
    complete -c locksmith -n "__locksmith_in $command" -l ttl -x -d 'Lifetime, expiring strategies'
    complete -c locksmith -n "__locksmith_in $command" -l limit -x -d 'Permits of a counting semaphore'
    complete -c locksmith -n "__locksmith_in $command" -l kill-after -x -d 'SIGKILL after SECONDS when lost'
    complete -c locksmith -n "__locksmith_in $command" -l lost-exit-code -x -d 'Exit code when lost'
    complete -c locksmith -n "__locksmith_in $command" -l strategy -x -a '(__locksmith_strategy_names)' -d 'Use this strategy'
    complete -c locksmith -n "__locksmith_in $command" -l require -x -a "$__locksmith_capabilities" -d 'Required capabilities'
    complete -c locksmith -n "__locksmith_in $command" -s v -l verbose -d 'Say what happens'
    complete -c locksmith -n "__locksmith_in $command" -l json -d 'At the end, one JSON line on stderr'
end
complete -c locksmith -n '__locksmith_in run' -s c -l command -x -d 'Run with /bin/sh -c'

complete -c locksmith -n '__locksmith_in strategies' -s h -l help -d 'Show help'
complete -c locksmith -n '__locksmith_in strategies' -l json -d 'One JSON document'

complete -c locksmith -n '__locksmith_in explain' -s h -l help -d 'Show help'
complete -c locksmith -n '__locksmith_in explain' -l require -x -a "$__locksmith_capabilities" -d 'Required capabilities'
complete -c locksmith -n '__locksmith_in explain' -l json -d 'One JSON document'
complete -c locksmith -n '__locksmith_in explain' -l start -d 'Also start the strategy'

complete -c locksmith -n '__locksmith_in status' -s h -l help -d 'Show help'
complete -c locksmith -n '__locksmith_in status' -l strategy -x -a '(__locksmith_strategy_names)' -d 'Ask this strategy'
complete -c locksmith -n '__locksmith_in status' -l require -x -a "$__locksmith_capabilities" -d 'Required capabilities'
complete -c locksmith -n '__locksmith_in status' -l json -d 'One JSON document'

complete -c locksmith -n '__locksmith_in config; and not __locksmith_in config check' -a check -d 'Check a configuration file'
complete -c locksmith -n '__locksmith_in config check' -s h -l help -d 'Show help'
complete -c locksmith -n '__locksmith_in config check' -l json -d 'One JSON document'
complete -c locksmith -n '__locksmith_in config check' -F
