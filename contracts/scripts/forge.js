#!/usr/bin/env node
// Runs the npm-installed forge (@foundry-rs/forge-linux-amd64) with the given arguments from the
// contracts/ directory, so `npm run test` needs no global Foundry install.
'use strict';
const { spawnSync } = require('child_process');
const path = require('path');
const root = path.resolve(__dirname, '..');
const forge = path.join(root, 'node_modules', '@foundry-rs', 'forge-linux-amd64', 'bin', 'forge');
const r = spawnSync(forge, process.argv.slice(2), { cwd: root, stdio: 'inherit' });
if (r.error) {
  console.error(`forge not runnable (${r.error.message}); run \`npm ci\` in contracts/`);
  process.exit(127);
}
process.exit(r.status === null ? 1 : r.status);
