// Copies the nodes' and credentials' icons next to their compiled files (what the
// n8n-nodes-starter's gulp task does), so n8n finds `file:switchboard.svg`.
import { cpSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
for (const top of ['nodes', 'credentials']) {
	const walk = (dir) => {
		for (const name of readdirSync(join(root, dir))) {
			const path = join(dir, name);
			if (statSync(join(root, path)).isDirectory()) walk(path);
			else if (/\.(svg|png)$/.test(name)) cpSync(join(root, path), join(root, 'dist', path));
		}
	};
	walk(top);
}
