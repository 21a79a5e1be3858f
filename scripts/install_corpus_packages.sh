#!/usr/bin/env bash
# Installs the public-domain / permissively licensed Debian packages that
# tools/corpus/build_corpus.py reads its text from. Idempotent: packages already present are skipped, so a second run costs
# one dpkg query per package.
# Usage: scripts/install_corpus_packages.sh && /usr/bin/python3 tools/corpus/build_corpus.py
set -euo pipefail

packages=(
  bible-kjv bible-kjv-text   # King James Bible (text public domain) + the `bible` reader
  sword-text-sparv diatheke  # Spanish Reina-Valera Bible 1909 (public domain) + its reader
  fortunes-zh                # tang300 / song100 poems (public domain)
  jargon-text                # The Jargon File 4.4.7 (public domain)
  dict-devil                 # Ambrose Bierce, The Devil's Dictionary (public domain)
  bsdgames                   # quiz tables (BSD)
)

source "$(dirname "$0")/lib/apt_install.sh"
apt_install_missing install_corpus_packages "${packages[@]}"
