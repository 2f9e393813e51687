#!/usr/bin/env bash
# The real PDFs the documents crate's tests read (crates/documents/tests/pdfs.rs), taken from
# Debian packages (downloaded, not installed: no dependencies come along) into
# .tools/test-pdfs/. Idempotent: does nothing when every file is there.
#   libtasn1.pdf                 libtasn1-doc       pdfTeX-1.40.24 (Texinfo), 36 pages
#   shared-mime-info-spec.pdf    shared-mime-info   pdfTeX-1.40.22 (LaTeX, hyperref), 17 pages
#   camlidl.pdf                  camlidl-doc        pdfTeX-0.13d (2001, Type 1 fonts), 26 pages
#   qt-test.pdf                  qtpdf5-examples    The Qt Company's PDF 1.6 with a form, 3 pages
# Their references (pdfinfo, pdftotext, pdftoppm) come from poppler-utils (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.tools/test-pdfs
want=(libtasn1.pdf shared-mime-info-spec.pdf camlidl.pdf qt-test.pdf)
all=1
for f in "${want[@]}"; do [ -s "$dir/$f" ] || all=0; done
[ $all = 1 ] && exit 0

mkdir -p "$dir/debs"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
# apt-get download needs a package list; a fresh machine may not have one yet
apt-cache show libtasn1-doc >/dev/null 2>&1 || $SUDO apt-get update -qq
(cd "$dir/debs" && apt-get download -qq libtasn1-doc shared-mime-info camlidl-doc qtpdf5-examples 2>/dev/null)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
cp "$tmp/usr/share/doc/libtasn1-doc/libtasn1.pdf" "$dir/libtasn1.pdf"
cp "$tmp/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf" "$dir/shared-mime-info-spec.pdf"
cp "$tmp/usr/share/doc/camlidl/camlidl-1.04.doc.pdf" "$dir/camlidl.pdf"
cp "$tmp/usr/lib/x86_64-linux-gnu/qt5/examples/pdf/multipage/resources/test.pdf" "$dir/qt-test.pdf"
rm -rf "$dir/debs"
echo "fetch-test-pdfs: ${want[*]} in $dir" >&2
