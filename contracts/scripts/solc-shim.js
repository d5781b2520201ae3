#!/usr/bin/env node
// A native-looking `solc` for forge, backed by solcjs (npm `solc`): answers `--version` and
// `--standard-json` (reads the JSON input on stdin, writes the JSON output on stdout). Other flags that
// forge passes (--allow-paths, --base-path, --include-path) are accepted and ignored: imports are
// resolved from the file system relative to the working directory and node_modules.
'use strict';
const fs = require('fs');
const path = require('path');
const solc = require('solc');

const args = process.argv.slice(2);
if (args.includes('--version')) {
  const v = solc.version(); // e.g. 0.8.30+commit.73712a01.Emscripten.clang
  process.stdout.write(`solc, the solidity compiler commandline interface\nVersion: ${v}\n`);
  process.exit(0);
}
if (!args.includes('--standard-json')) {
  process.stderr.write('solc-shim: only --version and --standard-json are supported\n');
  process.exit(1);
}
const roots = [process.cwd(), path.join(process.cwd(), 'node_modules')];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--base-path' || args[i] === '--include-path') roots.push(args[i + 1]);
}
function findImports(p) {
  for (const r of roots) {
    const f = path.isAbsolute(p) ? p : path.join(r, p);
    if (fs.existsSync(f)) return { contents: fs.readFileSync(f, 'utf8') };
  }
  return { error: `File not found: ${p}` };
}
const input = fs.readFileSync(0, 'utf8');
process.stdout.write(solc.compile(input, { import: findImports }));
