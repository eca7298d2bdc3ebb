#!/usr/bin/env bash
# axcurl.sh METHOD PATH [BODY] sends one request to the AX API, signed with
# AX-HMAC-SHA256 by openssl, with curl. PATH is below AX_URL and may carry a
# query: /api/v1/jobs?state=dead&kind=email.
#
#   AX_URL      the API's mount point (default http://127.0.0.1:8080/ax)
#   AX_KEY_ID   the key's ID
#   AX_SECRET   the key's secret
#
# The scheme (axhttp's package documentation, sign.go):
#   string to sign = "AX-HMAC-SHA256\n" METHOD "\n" PATH "\n" CANONICAL-QUERY "\n"
#                    UNIX-SECONDS "\n" NONCE "\n" hex(SHA-256(BODY))
#   X-AX-Signature = hex(HMAC-SHA256(SECRET, string to sign))
# The canonical query re-escapes each key and value as Go's url.QueryEscape
# does (spaces as +, all but A-Z a-z 0-9 - _ . ~ as %XX) and sorts the
# key=value pairs bytewise.
#
# AX_TIMESTAMP and AX_NONCE, when set, are used instead of the clock and a
# random nonce; with AX_PRINT_SIGNATURE=1 the script prints the string to
# sign and the signature instead of sending (for checking a client).
set -euo pipefail
export LC_ALL=C

method=${1:?usage: axcurl.sh METHOD PATH [BODY]}
target=${2:?usage: axcurl.sh METHOD PATH [BODY]}
body=${3-}
base=${AX_URL:-http://127.0.0.1:8080/ax}

# urldecode: + is a space, %XX a byte.
urldecode() {
  local s=${1//\\/\\\\}
  s=${s//+/ }
  printf '%b' "${s//%/\\x}"
}
# queryescape: as Go's url.QueryEscape.
queryescape() {
  local s=$1 out="" c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9_.~-]) out+=$c ;;
      ' ') out+=+ ;;
      *) out+=$(printf '%%%02X' "'$c") ;;
    esac
  done
  printf '%s' "$out"
}

path=${target%%\?*}
query=""
[[ $target == *\?* ]] && query=${target#*\?}
canonical=""
if [[ -n $query ]]; then
  canonical=$(
    IFS='&'
    for pair in $query; do
      [[ -z $pair ]] && continue
      key=${pair%%=*}
      value=""
      [[ $pair == *=* ]] && value=${pair#*=}
      printf '%s=%s\n' "$(queryescape "$(urldecode "$key")")" "$(queryescape "$(urldecode "$value")")"
    done | sort | paste -sd '&' -
  )
fi
# The path as sent: AX_URL's path, then PATH.
url_path=$(printf '%s' "$base" | sed -E 's#^[a-zA-Z]+://[^/]*##')$path

timestamp=${AX_TIMESTAMP:-$(date +%s)}
nonce=${AX_NONCE:-$(openssl rand -hex 16)}
body_sha256=$(printf '%s' "$body" | openssl dgst -sha256 -r | cut -d' ' -f1)
string_to_sign=$(printf 'AX-HMAC-SHA256\n%s\n%s\n%s\n%s\n%s\n%s' \
  "${method^^}" "$url_path" "$canonical" "$timestamp" "$nonce" "$body_sha256")
signature=$(printf '%s' "$string_to_sign" | openssl dgst -sha256 -hmac "${AX_SECRET:?set AX_SECRET}" -r | cut -d' ' -f1)

if [[ ${AX_PRINT_SIGNATURE:-} == 1 ]]; then
  printf '%s\n%s\n' "$string_to_sign" "$signature"
  exit 0
fi

args=(-sS -X "${method^^}" "$base$target"
  -H "X-AX-Key: ${AX_KEY_ID:?set AX_KEY_ID}"
  -H "X-AX-Timestamp: $timestamp"
  -H "X-AX-Nonce: $nonce"
  -H "X-AX-Signature: $signature"
  -w '\n%{http_code}\n')
if [[ -n $body ]]; then
  args+=(-H 'Content-Type: application/json' --data-binary "$body")
fi
curl "${args[@]}"
