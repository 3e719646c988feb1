# Completes one command line the way bash's programmable completion would, in a non-interactive
# bash, and prints what it offers: one "reply:WORD" line per candidate (sorted) and one
# "option:NAME" line per compopt -o NAME the completion set.
#
#   bash --norc --noprofile complete_line.bash plain FILE LINE   # FILE sourced alone
#   bash --norc --noprofile complete_line.bash loader DIR LINE   # bash-completion loads it from
#                                                                # DIR/bash-completion/completions
# The cursor is at the end of LINE. Words are split at blanks, and at '=' and ':' as readline's
# COMP_WORDBREAKS does. A program `fakeprog` completes --alpha and --beta, for `run -- fakeprog`.
set -u
mode=$1 where=$2 line=$3

compopt() {  # the builtin works only while readline completes; record what was asked instead
  while (($#)); do
    [[ $1 == -o ]] && printf 'option:%s\n' "$2" >>"$options_file" && shift
    shift
  done
  return 0
}
options_file=$(mktemp)
trap 'rm -f "$options_file"' EXIT

if [[ $mode == loader ]]; then
  export XDG_DATA_DIRS=$where
  BASH_COMPLETION_USER_DIR=$(mktemp -d) || exit 1  # never the user's own completions
  . /usr/share/bash-completion/bash_completion || exit 1
  rmdir "$BASH_COMPLETION_USER_DIR"
else
  . "$where" || exit 1
fi
_fakeprog() { COMPREPLY=($(compgen -W "--alpha --beta" -- "$2")); }
complete -F _fakeprog fakeprog

# Split as bash does.
words=()
word=""
for ((i = 0; i < ${#line}; i++)); do
  c=${line:i:1}
  if [[ $c == [[:blank:]] ]]; then
    [[ -n $word ]] && words+=("$word")
    word=""
  elif [[ $c == [=:] ]]; then
    [[ -n $word && $word != [=:]* ]] && words+=("$word") && word=""
    word+=$c
  else
    [[ $word == [=:]* ]] && words+=("$word") && word=""
    word+=$c
  fi
done
words+=("$word")  # the word being completed, empty after a blank
COMP_WORDS=("${words[@]}")
COMP_CWORD=$((${#words[@]} - 1))
COMP_LINE=$line
COMP_POINT=${#line}

spec=$(complete -p "${words[0]}" 2>/dev/null)
if [[ -z $spec && $mode == loader ]]; then
  # What bash does for a command with no completion yet: the default (-D) one, which loads it.
  _completion_loader "${words[0]}"
  spec=$(complete -p "${words[0]}" 2>/dev/null)
fi
[[ $spec == *" -F "* ]] || { echo "no completion function for ${words[0]}: ${spec:-none}" >&2; exit 1; }
func=${spec#* -F }
func=${func%% *}
COMPREPLY=()
prev=""
((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
"$func" "${words[0]}" "${COMP_WORDS[COMP_CWORD]}" "$prev"
printf 'reply:%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort -u | grep -v '^reply:$'
LC_ALL=C sort -u "$options_file"
exit 0
