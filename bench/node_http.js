// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// bench/node_http.js: Node's own http module on both ends, for bench/run's node workload.
//   node node_http.js server PORT       serves a 512-byte body on 127.0.0.1:PORT
//   node node_http.js client PORT N     N sequential requests, each on a new connection
//                                       (agent: false, as a one-shot client does);
//                                       prints "RPS <requests per second>"
'use strict';
const http = require('http');

const [mode, portArg, countArg] = process.argv.slice(2);
const port = Number(portArg);
const body = Buffer.alloc(512, 'x');

if (mode === 'server') {
	const server = http.createServer((req, res) => {
		res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': body.length });
		res.end(body);
	});
	server.keepAliveTimeout = 60000;
	server.listen(port, '127.0.0.1');
	process.on('SIGTERM', () => server.close(() => process.exit(0)));
	// close() waits for keep-alive connections: do not wait longer than this
	process.on('SIGTERM', () => setTimeout(() => process.exit(0), 2000).unref());
} else if (mode === 'client') {
	const total = Number(countArg);
	let done = 0;
	const start = process.hrtime.bigint();
	const one = () => {
		const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
			let got = 0;
			res.on('data', (d) => { got += d.length; });
			res.on('end', () => {
				if (res.statusCode !== 200 || got !== body.length) {
					console.error(`bad response: status ${res.statusCode}, ${got} bytes`);
					process.exit(1);
				}
				if (++done === total) {
					const s = Number(process.hrtime.bigint() - start) / 1e9;
					console.log(`RPS ${(total / s).toFixed(1)}`);
					return;
				}
				one();
			});
		});
		req.on('error', (e) => { console.error(`request ${done}: ${e.message}`); process.exit(1); });
	};
	one();
} else {
	console.error('usage: node_http.js server PORT | client PORT N');
	process.exit(2);
}
