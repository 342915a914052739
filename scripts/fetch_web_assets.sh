#!/usr/bin/env bash
# Fetch the web assets the book needs to render offline -- MathJax 3, RequireJS and
# the ipywidgets HTML manager -- from the npm registry at set-up time, and lay them
# out in book/_vendor/ (ignored by git). Without npm the book still builds, but
# the pages then load MathJax and the widget manager from a CDN. axe-core, which the
# browser test runs over every page, stays in .web/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
vendor=book/_vendor
stamp="$vendor/.complete"
if [ -f "$stamp" ] && [ -f .web/node_modules/axe-core/axe.min.js ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "NOTE: npm was not found, so MathJax and the widget manager cannot be fetched for"
  echo "      offline use. The book will still build, but its pages will load them from a CDN."
  echo "      Install Node.js/npm and run 'make web-assets' to render the book offline."
  exit 0
fi
echo "Fetching offline web assets (mathjax@3, requirejs@2, @jupyter-widgets/html-manager@1, axe-core@4) ..."
mkdir -p .web
if ! npm install --prefix .web --no-audit --no-fund --no-save --silent \
      mathjax@3 requirejs@2 @jupyter-widgets/html-manager@1 axe-core@4 ; then
  echo "NOTE: npm could not fetch the web assets; the book will load them from a CDN."
  exit 0
fi
rm -rf "$vendor"
mkdir -p "$vendor/mathjax" "$vendor/html-manager"
cp -r .web/node_modules/mathjax/es5/. "$vendor/mathjax/"
cp .web/node_modules/requirejs/require.js "$vendor/require.js"
cp -r .web/node_modules/@jupyter-widgets/html-manager/dist "$vendor/html-manager/dist"
rm -f "$vendor"/html-manager/dist/*.map
touch "$stamp"
echo "Offline web assets are in $vendor/"
