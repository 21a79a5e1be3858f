# Sourced by the install scripts. apt_install_missing NAME PACKAGE...: installs with apt-get
# the packages dpkg does not list as installed (with sudo when not root), so a second run
# costs one dpkg query per package. NAME prefixes the messages.
apt_install_missing() {
  local name=$1
  shift
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "$name: all $# packages present"
    return 0
  fi
  echo "$name: installing ${missing[*]}"
  local sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
