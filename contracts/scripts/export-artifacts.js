#!/usr/bin/env node
// Writes ../protocol/contracts.json: the ABI and creation bytecode of the contracts the Python side
// deploys and calls (TesseraNetwork, TesseraToken), taken from forge's out/ after `forge build`.
// The file is committed so that nodes and `tessera contracts deploy` work without a Solidity toolchain;
// `npm run build` regenerates it and tests/chain checks it is current.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '..');
const out = {};
for (const name of ['TesseraNetwork', 'TesseraToken']) {
  const j = JSON.parse(fs.readFileSync(path.join(root, 'out', `${name}.sol`, `${name}.json`), 'utf8'));
  out[name] = { abi: j.abi, bytecode: j.bytecode.object };
}
const dest = path.resolve(root, '..', 'protocol', 'contracts.json');
fs.writeFileSync(dest, JSON.stringify(out) + '\n');
console.error(`wrote ${path.relative(process.cwd(), dest)}`);
