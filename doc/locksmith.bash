# SPDX-License-Identifier: MIT
# bash completion for locksmith(1). Installed as share/bash-completion/completions/locksmith.
# tests/cli/cli_manual_test.cpp checks that each command's options here are exactly those its
# --help lists.

_locksmith_commands="run hold strategies explain config status"
_locksmith_global_options="-h --help --version --config"
_locksmith_run_options="-h --help -x -e --exclusive -s --shared -n --nonblock --no-wait -w --wait
    --timeout -E --conflict-exit-code --ttl --limit --kill-after --lost-exit-code --strategy --require
    -c --command -v --verbose --json"
_locksmith_hold_options="-h --help -x -e --exclusive -s --shared -n --nonblock --no-wait -w --wait
    --timeout -E --conflict-exit-code --ttl --limit --kill-after --lost-exit-code --strategy --require
    -v --verbose --json"
_locksmith_strategies_options="-h --help --json"
_locksmith_explain_options="-h --help --require --json --start"
_locksmith_status_options="-h --help --strategy --require --json"
_locksmith_config_check_options="-h --help --json"
_locksmith_capabilities="exclusive shared noblock native_wait expiring distributed serializable
    crash_release fencing fair consensus"

# The strategies this build has, from `locksmith strategies` (the first column of its table).
_locksmith_strategy_names() {
    "${COMP_WORDS[0]}" strategies 2>/dev/null | awk 'listing && NF == 0 { exit }
        listing { print $1 } /^NAME / { listing = 1 }'
}

_locksmith() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local command="" subcommand="" i word
    COMPREPLY=()

    # The command word, and everything after "--" in run: complete a command line there.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if [[ $command == run && $word == -- ]]; then
            if declare -F _command_offset >/dev/null; then
                _command_offset $((i + 1))
            else
                COMPREPLY=($(compgen -c -- "$cur"))
            fi
            return
        fi
        if [[ -z $command ]]; then
            case $word in
                --config) ((i++)) ;;
                -*) ;;
                *) command=$word ;;
            esac
        elif [[ $command == config && -z $subcommand && $word != -* ]]; then
            subcommand=$word
        fi
    done

    case $prev in
        --config)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --strategy)
            COMPREPLY=($(compgen -W "$(_locksmith_strategy_names)" -- "$cur"))
            return ;;
        --require)
            # A list joined by ',' or '|': complete the word after the last one.
            local done_part=${cur%[,|]*} last=${cur##*[,|]}
            [[ $done_part == "$cur" ]] && done_part="" || done_part+=${cur:${#done_part}:1}
            COMPREPLY=($(compgen -P "$done_part" -W "$_locksmith_capabilities" -- "$last"))
            compopt -o nospace 2>/dev/null
            return ;;
        -w | --wait | --timeout | -E | --conflict-exit-code | --ttl | --limit | --kill-after | \
            --lost-exit-code | -c | --command)
            return ;;
    esac

    local options
    case $command in
        "") options=$_locksmith_global_options ;;
        run) options=$_locksmith_run_options ;;
        strategies) options=$_locksmith_strategies_options ;;
        explain) options=$_locksmith_explain_options ;;
        hold) options=$_locksmith_hold_options ;;
        status) options=$_locksmith_status_options ;;
        config)
            if [[ -z $subcommand ]]; then
                COMPREPLY=($(compgen -W "check" -- "$cur"))
                return
            fi
            options=$_locksmith_config_check_options
            if [[ $cur != -* ]]; then
                COMPREPLY=($(compgen -f -- "$cur"))
                return
            fi ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
    elif [[ -z $command ]]; then
        COMPREPLY=($(compgen -W "$_locksmith_commands" -- "$cur"))
    fi
}

complete -F _locksmith locksmith
