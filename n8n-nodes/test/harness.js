// A live Switchboard for the node tests, and n8n's function contexts around the nodes.
//
// startSwitchboard() creates a fresh database on the suite's PostgreSQL
// (SWITCHBOARD_TEST_DATABASE_URL, else the embedded server, as `make test` does),
// runs `switchboard serve` on a free port of 127.0.0.1 against it, and returns its URL, the
// admin key and a helper to make agent keys. Nothing is mocked on Switchboard's side: the
// contexts below send real HTTP requests, as n8n's helpers do (X-API-Key from the
// credential, status errors left to the node: ignoreHttpStatusErrors).
'use strict';

const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..');
const VENV_BIN = process.env.SWITCHBOARD_BIN_DIR || path.join(REPO, '.venv', 'bin');
const PYTHON = path.join(VENV_BIN, 'python');
let SERVER_URL = process.env.SWITCHBOARD_TEST_DATABASE_URL;
let embeddedHolder;

// The suite's PostgreSQL: SWITCHBOARD_TEST_DATABASE_URL, else the embedded server, as `make
// test` does. A process joined to the embedded server lets go of it when it ends, so one
// Python process holds it (until its stdin closes) while the tests run.
async function serverUrl() {
	if (SERVER_URL) return SERVER_URL;
	const code =
		'import sys\nfrom tests import dbutil\nprint(dbutil.server_url(), flush=True)\nsys.stdin.read()';
	embeddedHolder = spawn(PYTHON, ['-c', code], { cwd: REPO, stdio: ['pipe', 'pipe', 'inherit'] });
	SERVER_URL = await new Promise((resolve, reject) => {
		let out = '';
		embeddedHolder.stdout.on('data', (chunk) => {
			out += chunk;
			if (out.includes('\n')) resolve(out.trim());
		});
		embeddedHolder.once('exit', (code) => reject(new Error(`embedded PostgreSQL: exit ${code}`)));
	});
	return SERVER_URL;
}

async function releaseServer() {
	if (!embeddedHolder) return;
	const exited = new Promise((resolve) => embeddedHolder.once('exit', resolve));
	embeddedHolder.stdin.end();
	await exited;
	embeddedHolder = undefined;
}

async function freePort() {
	return await new Promise((resolve, reject) => {
		const server = net.createServer();
		server.once('error', reject);
		server.listen(0, '127.0.0.1', () => {
			const { port } = server.address();
			server.close(() => resolve(port));
		});
	});
}

function database(action, name) {
	// tests/dbutil.py is the suite's one way to make and drop databases.
	const code =
		'import asyncio, sys\nfrom tests import dbutil\n' +
		`asyncio.run(dbutil.${action}_database(sys.argv[1], sys.argv[2]))`;
	execFileSync(PYTHON, ['-c', code, SERVER_URL, name], {
		cwd: REPO,
		stdio: 'inherit',
	});
}

function withDatabase(url, name) {
	// dbutil's, which knows the embedded server's socket URLs (no host, ?host=<dir>).
	const code = 'import sys\nfrom tests import dbutil\nprint(dbutil.with_database(sys.argv[1], sys.argv[2]))';
	return execFileSync(PYTHON, ['-c', code, url, name], { cwd: REPO, encoding: 'utf8' }).trim();
}

async function request(base, method, pathname, key, body, headers = {}) {
	const response = await fetch(`${base}${pathname}`, {
		method,
		headers: {
			...(key ? { 'X-API-Key': key } : {}),
			...(body !== undefined ? { 'content-type': 'application/json' } : {}),
			...headers,
		},
		body: body !== undefined ? JSON.stringify(body) : undefined,
	});
	const text = await response.text();
	let json;
	try {
		json = text ? JSON.parse(text) : undefined;
	} catch {
		json = text;
	}
	return { status: response.status, body: json, headers: response.headers };
}

async function startSwitchboard() {
	const name = `sb_n8n_nodes_${crypto.randomBytes(8).toString('hex')}`;
	await serverUrl();
	database('create', name);
	const port = await freePort();
	const adminKey = crypto.randomBytes(24).toString('base64url');
	const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'switchboard-n8n-nodes-'));
	const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SWITCHBOARD_')));
	Object.assign(env, {
		SWITCHBOARD_DATABASE_URL: withDatabase(SERVER_URL, name),
		SWITCHBOARD_DATA_DIR: dataDir,
		SWITCHBOARD_HOST: '127.0.0.1',
		SWITCHBOARD_PORT: String(port),
		SWITCHBOARD_ADMIN_KEY: adminKey,
		SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK: 'true', // the trigger's receiver runs on 127.0.0.1
		SWITCHBOARD_LOG_LEVEL: 'WARNING',
	});
	const logPath = path.join(dataDir, 'switchboard.log');
	const log = fs.openSync(logPath, 'a');
	const child = spawn(path.join(VENV_BIN, 'switchboard'), ['serve'], {
		cwd: REPO,
		env,
		stdio: ['ignore', log, log],
		detached: true,
	});
	const url = `http://127.0.0.1:${port}`;
	const deadline = Date.now() + 90_000;
	for (;;) {
		if (child.exitCode !== null) {
			throw new Error(`switchboard serve exited ${child.exitCode}: ${fs.readFileSync(logPath, 'utf8')}`);
		}
		try {
			if ((await fetch(`${url}/ready`)).status === 200) break;
		} catch {
			// not listening yet
		}
		if (Date.now() > deadline) throw new Error(`switchboard serve not ready: ${fs.readFileSync(logPath, 'utf8')}`);
		await new Promise((r) => setTimeout(r, 250));
	}
	const sb = {
		url,
		adminKey,
		request: (method, pathname, key, body, headers) => request(url, method, pathname, key, body, headers),
		async agentKey(agentName, roles) {
			const created = await request(url, 'POST', '/v1/agents', adminKey, { name: agentName, roles });
			if (created.status === 201) return created.body.api_key;
			const issued = await request(url, 'POST', `/v1/agents/${agentName}/key`, adminKey);
			if (issued.status !== 200 && issued.status !== 201) throw new Error(JSON.stringify(issued));
			if (roles) {
				await request(url, 'PATCH', `/v1/agents/${agentName}`, adminKey, { roles });
			}
			return issued.body.api_key;
		},
		async stop() {
			try {
				process.kill(-child.pid, 'SIGTERM');
			} catch {
				// already gone
			}
			await new Promise((resolve) => {
				if (child.exitCode !== null) return resolve();
				const timer = setTimeout(() => {
					try {
						process.kill(-child.pid, 'SIGKILL');
					} catch {
						// gone
					}
					resolve();
				}, 15_000);
				child.once('exit', () => {
					clearTimeout(timer);
					resolve();
				});
			});
			fs.closeSync(log);
			database('drop', name);
			fs.rmSync(dataDir, { recursive: true, force: true });
			await releaseServer();
		},
	};
	return sb;
}

// What n8n's httpRequestWithAuthentication does for this credential: the generic
// authentication (X-API-Key), qs, body, full response, status errors left to the caller.
async function httpRequest(credentials, options) {
	const url = new URL(options.baseURL ? `${options.baseURL}${options.url}` : options.url);
	for (const [k, v] of Object.entries(options.qs ?? {})) {
		if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
	}
	const headers = { ...(options.headers ?? {}), 'X-API-Key': credentials.apiKey };
	let body = options.body;
	if (body !== undefined && typeof body !== 'string') {
		body = JSON.stringify(body);
		headers['content-type'] = headers['content-type'] ?? 'application/json';
	}
	const response = await fetch(url, { method: options.method ?? 'GET', headers, body });
	const text = await response.text();
	let parsed = text;
	if (text) {
		try {
			parsed = JSON.parse(text);
		} catch {
			parsed = text;
		}
	}
	if (response.status >= 400 && !options.ignoreHttpStatusErrors) {
		const error = new Error(`Request failed with status code ${response.status}`);
		error.httpCode = String(response.status);
		throw error;
	}
	if (!options.returnFullResponse) return parsed;
	return { body: parsed, headers: Object.fromEntries(response.headers), statusCode: response.status };
}

const NODE_BASE = { id: 'node-1', name: 'Switchboard', typeVersion: 1, position: [0, 0] };

function baseContext(credentials, parameters, extra = {}) {
	const node = { ...NODE_BASE, type: extra.type ?? 'n8n-nodes-switchboard.switchboard', parameters: {} };
	const value = (name, i, fallback) => {
		const source = typeof parameters === 'function' ? parameters(i ?? 0) : parameters;
		return name in source ? source[name] : fallback;
	};
	return {
		getNode: () => node,
		getCredentials: async () => credentials,
		getExecutionId: () => extra.executionId ?? 'execution-1',
		getInstanceId: () => extra.instanceId ?? 'instance-1',
		getWorkflow: () => ({ id: 'workflow-1', name: 'Test', active: true }),
		continueOnFail: () => Boolean(extra.continueOnFail),
		getNodeParameter: (name, i, fallback) => value(name, i, fallback),
		helpers: {
			httpRequestWithAuthentication: async (_type, options) => await httpRequest(credentials, options),
		},
		_value: value,
	};
}

/** IExecuteFunctions for the Switchboard node: one parameter set per item (a function of i). */
function executeContext(credentials, items, parameters, extra = {}) {
	return { ...baseContext(credentials, parameters, extra), getInputData: () => items.map((json) => ({ json })) };
}

/** ILoadOptionsFunctions: parameters do not matter to the loaders. */
function loadOptionsContext(credentials) {
	return baseContext(credentials, {});
}

/** ISupplyDataFunctions for the chat memory (item 0). */
function supplyDataContext(credentials, parameters, json = {}) {
	const context = baseContext(credentials, parameters, { type: 'n8n-nodes-switchboard.switchboardChatMemory' });
	context.evaluateExpression = (expression) => {
		const match = /\$json\.(\w+)/.exec(expression);
		return match ? json[match[1]] : undefined;
	};
	return context;
}

/**
 * IHookFunctions and IWebhookFunctions for the trigger, sharing one static data object as
 * n8n does for a node of a workflow.
 */
function triggerContexts(credentials, parameters, webhookUrl) {
	const staticData = {};
	const hook = {
		...baseContext(credentials, (i) => parameters, { type: 'n8n-nodes-switchboard.switchboardTrigger' }),
		getNodeParameter: (name, fallback) => (name in parameters ? parameters[name] : fallback),
		getWorkflowStaticData: () => staticData,
		getNodeWebhookUrl: () => webhookUrl,
	};
	const webhook = (request) => {
		const response = { statusCode: 200, sent: undefined };
		return {
			context: {
				...hook,
				getRequestObject: () => ({ rawBody: request.rawBody, body: JSON.parse(request.rawBody.toString()) }),
				getHeaderData: () => request.headers,
				getBodyData: () => JSON.parse(request.rawBody.toString()),
				getResponseObject: () => ({
					status(code) {
						response.statusCode = code;
						return this;
					},
					json(body) {
						response.sent = body;
						return this;
					},
				}),
			},
			response,
		};
	};
	return { hook, webhook, staticData };
}

module.exports = {
	startSwitchboard,
	executeContext,
	loadOptionsContext,
	supplyDataContext,
	triggerContexts,
	httpRequest,
	freePort,
};
