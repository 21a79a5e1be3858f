#!/usr/bin/env bash
# Installs the public-domain / permissively licensed Debian packages that tools/build_corpus.py
# reads its text from. Idempotent: packages already present are skipped, so a second run costs
# one dpkg query per package.
# Usage: scripts/install_corpus_packages.sh && /usr/bin/python3 tools/build_corpus.py
set -euo pipefail

packages=(
  bible-kjv bible-kjv-text   # King James Bible (text public domain) + the `bible` reader
  fortunes-zh                # tang300 / song100 poems (public domain)
  jargon-text                # The Jargon File 4.4.7 (public domain)
  dict-devil                 # Ambrose Bierce, The Devil's Dictionary (public domain)
  bsdgames                   # quiz tables (BSD)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_corpus_packages: all ${#packages[@]} packages present"
  exit 0
fi
echo "install_corpus_packages: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
