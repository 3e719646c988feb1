# bash completion for memtrace(1): commands, each command's options and their values, snapshot
# files, and after `memtrace run [--] PROGRAM` the program's own completion.
#
# Installed as share/bash-completion/completions/memtrace, where the bash-completion package loads
# it on first use (its directory must be in XDG_DATA_DIRS: /usr/local/share and /usr/share are by
# default). It needs nothing from that package: sourced alone (`. memtrace.bash`) it works the same,
# except that after `run PROGRAM` only completions already defined for PROGRAM are used, where
# bash-completion would also load PROGRAM's on demand.
#
# The option lists below are checked against each command's --help by docs/tests/check_completion.py:
# an option added to a command fails that test until it is added here (and to docs/man/memtrace.1.in).
# `declare -g`: bash-completion sources this file inside a function.

declare -g _memtrace_commands="run summary peak leaks diff merge flamegraph ranks replay report recover top snap help version"
declare -gA _memtrace_options=(
  [run]="--sim -o --output --no-summary --stacks -h --help"
  [summary]="--json --device --frames --by --lenient -h --help"
  [peak]="--json --device --frames --by --top --lenient -h --help"
  [leaks]="--json --device --frames --by --top --lenient -h --help"
  [diff]="--json --device --frames --by --at --top --lenient -h --help"
  [merge]="--json --device -o --lenient -h --help"
  [flamegraph]="--at --device --frames --by --format -o --json --lenient -h --help"
  [ranks]="--json --device --lenient -h --help"
  [replay]="--alloc-conf --capacity --device --json --lenient -h --help"
  [report]="--device -o --json --lenient -h --help"
  [recover]="-o --output -h --help"
  [top]="--once --json -h --help"
  [snap]="-o --timeout -h --help"
)
# Options that take a value, and the values that can be listed ("" = nothing to offer: a number).
declare -gA _memtrace_values=(
  [--frames]="short all"
  [--by]="owner stack range"
  [--at]="end peak"
  [--format]="folded speedscope"
  [--stacks]="none native"
  [--capacity]="recorded"
  [--device]=""
  [--top]=""
  [--alloc-conf]=""
  [-o]=""
  [--output]=""
)
# Options that may be given more than once (the others are not offered again).
declare -g _memtrace_repeatable=" --alloc-conf "
# What the positional arguments are: snapshot files, a directory, commands, or the program to run.
declare -gA _memtrace_operands=(
  [run]=program [summary]=snapshot [peak]=snapshot [leaks]=snapshot [diff]=snapshot [merge]=snapshot
  [flamegraph]=snapshot [ranks]=directory [replay]=snapshot [report]=snapshot [recover]=state [top]=none [snap]=none [help]=command [version]=none
)
# The keys of --alloc-conf (PYTORCH_CUDA_ALLOC_CONF syntax plus memtrace's own), with their values
# where they are a fixed few. Checked against core/caching/alloc_conf.cpp by the same test.
declare -gA _memtrace_alloc_conf=(
  [max_split_size_mb]="" [max_non_split_rounding_mb]="" [large_segment_size_mb]=""
  [roundup_power2_divisions]="" [garbage_collection_threshold]="" [per_process_memory_fraction]=""
  [expandable_segments]="True False" [release_lock_on_cudamalloc]="True False" [backend]="native"
  [pinned_use_cuda_host_register]="True False" [pinned_num_register_threads]=""
  [pinned_use_background_threads]="True False" [pinned_reserve_segment_size_mb]=""
  [pinned_free_catch_all]="True False" [graph_capture_record_stream_reuse]="True False"
  [throw_on_cudamalloc_oom]="True False"
  [memtrace_policy]="pytorch remap" [memtrace_deferred_free]="True False" [memtrace_free_batch_mb]=""
)

# compopt only works while bash is completing; the tests call the function directly.
_memtrace_compopt() { compopt "$@" 2>/dev/null; return 0; }

# bash splits `--frames=all` and `a:b` into several words at '=' and ':' (COMP_WORDBREAKS), but
# readline replaces only the text after the last of them. Joins such pieces back into the words
# the user typed: _memtrace_w (words), _memtrace_cw (index of the word being completed, up to the
# cursor) and _memtrace_at (for each word, the index in COMP_WORDS it starts at).
_memtrace_join_words() {
  _memtrace_w=() _memtrace_at=() _memtrace_cw=0
  local line=${COMP_LINE:0:COMP_POINT} i tok trimmed glued
  for ((i = 0; i <= COMP_CWORD && i < ${#COMP_WORDS[@]}; i++)); do
    tok=${COMP_WORDS[i]}
    trimmed=${line#"${line%%[![:blank:]]*}"}
    glued=0
    if ((i > 0)) && [[ ${#trimmed} -eq ${#line} ]] &&
      [[ $tok == [=:]* || ${_memtrace_w[-1]} == *[=:] ]]; then
      glued=1
    fi
    line=$trimmed
    if ((i == COMP_CWORD)); then
      tok=${line:0:${#tok}}  # the part before the cursor
    fi
    if ((glued)); then
      _memtrace_w[-1]+=$tok
    else
      _memtrace_w+=("$tok")
      _memtrace_at+=("$i")
    fi
    line=${line:${#tok}}
  done
  _memtrace_cw=$((${#_memtrace_w[@]} - 1))
}

# Sets COMPREPLY to the candidates (full words) that start with `word`, each cut to the part after
# the word's last '=' or ':' (what readline replaces).
_memtrace_reply() {
  local word=$1 c head=""
  shift
  [[ $word == *[=:]* ]] && head=${word%"${word##*[=:]}"}
  COMPREPLY=()
  for c in "$@"; do
    [[ $c == "$word"* ]] && COMPREPLY+=("${c#"$head"}")
  done
}

# Snapshot files (*.pickle, *.pkl) and directories; every file when none matches.
_memtrace_files() {
  local cur=$1 kind=$2 IFS=$'\n'
  _memtrace_compopt -o filenames
  if [[ $kind == directory ]]; then
    COMPREPLY=($(compgen -d -- "$cur"))
    return
  fi
  local -a snaps=($(compgen -f -X '!*.pickle' -- "$cur") $(compgen -f -X '!*.pkl' -- "$cur"))
  [[ $kind == state ]] && snaps=($(compgen -f -X '!*.state' -- "$cur"))
  if [[ $kind == any || ${#snaps[@]} -eq 0 ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  else
    COMPREPLY=("${snaps[@]}" $(compgen -d -- "$cur"))
  fi
}

# --alloc-conf KEY:VALUE,KEY:VALUE...: the keys, and the values of those that have a fixed few.
# `lead` is what comes before the setting in the word ("--alloc-conf=" or nothing).
_memtrace_alloc_conf_reply() {
  local lead=$1 conf=$2 done_part="" piece key v
  [[ $conf == *,* ]] && done_part=${conf%,*},
  piece=${conf##*,}
  local -a cands=()
  if [[ $piece == *:* ]]; then
    key=${piece%%:*}
    for v in ${_memtrace_alloc_conf[$key]-}; do cands+=("$lead$done_part$key:$v"); done
  else
    for key in "${!_memtrace_alloc_conf[@]}"; do cands+=("$lead$done_part$key:"); done
    _memtrace_compopt -o nospace
  fi
  _memtrace_reply "$lead$conf" "${cands[@]}"
}

# The program's own completion from word `first` (an index in COMP_WORDS) on, as if it had been
# typed alone: bash-completion's _command_offset when it is loaded, else the same done here.
_memtrace_program() {
  local first=$1
  if declare -F _command_offset >/dev/null; then
    _command_offset "$first"
    return
  fi
  local i
  for ((i = 0; i < first; i++)); do
    local lead=${COMP_LINE%%"${COMP_WORDS[i]}"*}
    COMP_LINE=${COMP_LINE:$((${#lead} + ${#COMP_WORDS[i]}))}
    COMP_POINT=$((COMP_POINT - ${#lead} - ${#COMP_WORDS[i]}))
  done
  COMP_WORDS=("${COMP_WORDS[@]:first}")
  COMP_CWORD=$((COMP_CWORD - first))
  local cur=${COMP_WORDS[COMP_CWORD]}
  if ((COMP_CWORD == 0)); then
    _memtrace_compopt -o filenames
    local IFS=$'\n'
    COMPREPLY=($(compgen -d -c -- "$cur"))
    return
  fi
  local prog=${COMP_WORDS[0]} spec
  spec=$(complete -p "$prog" 2>/dev/null || complete -p "${prog##*/}" 2>/dev/null)
  if [[ $spec == *" -F "* ]]; then
    local func=${spec#* -F }
    func=${func%% *}
    COMPREPLY=()
    "$func" "$prog" "$cur" "${COMP_WORDS[COMP_CWORD - 1]}"
  elif [[ -n $spec ]]; then
    spec=${spec#complete}
    spec=${spec% *}
    local IFS=$'\n'
    COMPREPLY=($(eval compgen "$spec" -- '"$cur"'))
  else
    _memtrace_files "$cur" any
  fi
}

_memtrace() {
  local _memtrace_w _memtrace_at _memtrace_cw
  _memtrace_join_words
  local cur=${_memtrace_w[_memtrace_cw]} prev=""
  ((_memtrace_cw > 0)) && prev=${_memtrace_w[_memtrace_cw - 1]}
  COMPREPLY=()

  if ((_memtrace_cw == 1)); then
    if [[ $cur == -* ]]; then
      _memtrace_reply "$cur" --help --version
    else
      _memtrace_reply "$cur" $_memtrace_commands
    fi
    return 0
  fi
  local cmd=${_memtrace_w[1]}
  [[ -n ${_memtrace_operands[$cmd]-} ]] || return 0

  # Walk the words before the current one: skip option values, find where run's program starts.
  local i w only_operands=0 program=-1 used=" "
  for ((i = 2; i < _memtrace_cw; i++)); do
    w=${_memtrace_w[i]}
    if ((only_operands)); then
      [[ $cmd == run ]] && program=$i && break
      continue
    fi
    case $w in
      --) only_operands=1 ;;
      -?*=*) used+="${w%%=*} " ;;
      -?*)
        used+="$w "
        if [[ -v "_memtrace_values[$w]" ]]; then ((i++)); fi
        ;;
      *) [[ $cmd == run ]] && program=$i && break ;;
    esac
  done
  if ((program < 0)) && ((only_operands)) && [[ $cmd == run ]]; then program=$_memtrace_cw; fi
  if ((program >= 0)); then
    _memtrace_program "${_memtrace_at[program]}"
    return 0
  fi

  # The value of an option: `--frames VALUE` or `--frames=VALUE`.
  local opt="" value=$cur
  if ((!only_operands)); then
    if [[ $cur == -?*=* ]]; then
      opt=${cur%%=*}
    elif [[ $prev == -?* && $prev != *=* && -v "_memtrace_values[$prev]" ]]; then
      opt=$prev
    fi
  fi
  if [[ -n $opt ]]; then
    local -a cands=()
    case $opt in
      -o | --output) _memtrace_files "${value#"$opt="}" any; return 0 ;;
      --alloc-conf)
        if [[ $value == "$opt="* ]]; then
          _memtrace_alloc_conf_reply "$opt=" "${value#"$opt="}"
        else
          _memtrace_alloc_conf_reply "" "$value"
        fi
        return 0
        ;;
    esac
    for w in ${_memtrace_values[$opt]-}; do
      [[ $value == "$opt="* ]] && cands+=("$opt=$w") || cands+=("$w")
    done
    _memtrace_reply "$value" "${cands[@]}"
    return 0
  fi

  if [[ $cur == -* ]] && ((!only_operands)); then
    local -a cands=()
    for w in ${_memtrace_options[$cmd]-}; do
      [[ $used == *" $w "* && $_memtrace_repeatable != *" $w "* ]] || cands+=("$w")
    done
    _memtrace_reply "$cur" "${cands[@]}"
    return 0
  fi
  case ${_memtrace_operands[$cmd]} in
    snapshot | directory | state) _memtrace_files "$cur" "${_memtrace_operands[$cmd]}" ;;
    command) ((_memtrace_cw == 2)) && _memtrace_reply "$cur" "${!_memtrace_options[@]}" ;;
    program) _memtrace_program "${_memtrace_at[_memtrace_cw]}" ;;
  esac
  return 0
}

complete -F _memtrace memtrace
