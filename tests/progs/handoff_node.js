// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// handoff_node.js PORT N: Node.js hands each accepted connection to a forked child
// with child.send('socket', sock) (SCM_RIGHTS), which echoes it to its end; after N
// connections have ended, prints "HANDED N" and exits (tests/integration/handoff.sh).
'use strict';
const cp = require('child_process');
const net = require('net');

if (process.argv[2] === 'child') {
  process.on('message', (m, sock) => {
    if (m !== 'socket' || !sock) return;
    sock.on('end', () => process.send('done'));
    sock.pipe(sock);
  });
} else {
  const n = +process.argv[3];
  let done = 0;
  const child = cp.fork(__filename, ['child']);
  child.on('message', () => {
    if (++done === n) {
      console.log('HANDED ' + n);
      child.kill();
      process.exit(0);
    }
  });
  net.createServer({ pauseOnConnect: true }, (s) => child.send('socket', s))
    .listen(+process.argv[2], '127.0.0.1', () => console.log('LISTENING'));
}
