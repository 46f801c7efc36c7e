// The nodes' logic against a live Switchboard (test/harness.js starts one per run): every
// operation, per-item processing and "Continue On Fail", problem+json errors, idempotency
// keys, the dropdowns, the chat memory and the trigger with a real signed event.
// Run `npm run build` first: the tests load dist/, the files n8n loads.
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const { after, before, describe, test } = require('node:test');

const { Switchboard } = require('../dist/nodes/Switchboard/Switchboard.node.js');
const { SwitchboardTrigger, signatureIsValid } = require('../dist/nodes/SwitchboardTrigger/SwitchboardTrigger.node.js');
const { SwitchboardChatMemory } = require('../dist/nodes/SwitchboardChatMemory/SwitchboardChatMemory.node.js');
const { SwitchboardApi } = require('../dist/credentials/SwitchboardApi.credentials.js');
const {
	executeContext,
	freePort,
	httpRequest,
	loadOptionsContext,
	startSwitchboard,
	supplyDataContext,
	triggerContexts,
} = require('./harness');

let sb;
let agent; // an `authorized` agent's credential
let manager; // a coordination_manager's credential (the n8n integration key)
let admin;

before(async () => {
	sb = await startSwitchboard();
	agent = { baseUrl: sb.url, apiKey: await sb.agentKey('N8n_Test_Agent', ['authorized']) };
	manager = { baseUrl: sb.url, apiKey: await sb.agentKey('Orchestrator_Agent', ['coordination_manager']) };
	admin = { baseUrl: `${sb.url}/`, apiKey: sb.adminKey }; // a trailing slash is forgiven
});

after(async () => {
	if (sb) await sb.stop();
});

const node = new Switchboard();

/** Runs the node's execute() over items; returns the output items' json. */
async function run(credentials, items, parameters, extra) {
	const ctx = executeContext(credentials, items, parameters, extra);
	const [output] = await node.execute.call(ctx);
	return output;
}

async function runOne(credentials, parameters, extra) {
	const output = await run(credentials, [{}], parameters, extra);
	assert.equal(output.length, 1);
	return output[0].json;
}

async function rejects(promise, httpCode, pattern) {
	await assert.rejects(promise, (error) => {
		assert.equal(error.httpCode, httpCode, `${error.message} ${error.description}`);
		if (pattern) assert.match(`${error.message}\n${error.description}`, pattern);
		return true;
	});
}

describe('credential', () => {
	test('its test request passes with the key and fails without it', async () => {
		const { request } = new SwitchboardApi().test;
		assert.equal(request.url, '/v1/memory-types');
		const options = { method: request.method, url: `${sb.url}${request.url}`, ignoreHttpStatusErrors: true, returnFullResponse: true };
		const good = await httpRequest(agent, options);
		assert.equal(good.statusCode, 200);
		assert.ok(good.body.some((t) => t.name === 'planning'));
		const bad = await httpRequest({ ...agent, apiKey: 'not-a-key-at-all-0000' }, options);
		assert.equal(bad.statusCode, 401);
	});
});

describe('session', () => {
	let sessionId;
	const user = `crm-${crypto.randomUUID()}`;

	test('create with your own user id, then get', async () => {
		const created = await runOne(agent, {
			resource: 'session',
			operation: 'create',
			user,
			sessionType: 'planning_session',
			additionalFields: { sessionState: '{"active_process": "budget_plan"}', priority: 'high', ttlSeconds: 3600 },
		});
		assert.equal(created.version, 1);
		assert.equal(created.session_type, 'planning_session');
		assert.equal(created.session_state.active_process, 'budget_plan');
		sessionId = created.session_id;
		const again = await runOne(agent, { resource: 'session', operation: 'create', user });
		assert.equal(again.user_id, created.user_id, 'the same external id is the same user');
		const got = await runOne(agent, { resource: 'session', operation: 'get', sessionId });
		assert.equal(got.session_id, sessionId);
		assert.equal(got.priority, 'high');
	});

	test('update merges by default, on top of the version read', async () => {
		const updated = await runOne(agent, {
			resource: 'session',
			operation: 'update',
			sessionId,
			updateFields: { sessionState: { agent_outputs: { N8n_Test_Agent: { draft: 1 } } }, progressPercentage: 40 },
		});
		assert.equal(updated.version, 2);
		assert.equal(updated.progress_percentage, 40);
		assert.equal(updated.session_state.active_process, 'budget_plan', 'merged, not replaced');
		assert.deepEqual(updated.session_state.agent_outputs, { N8n_Test_Agent: { draft: 1 } });
	});

	test('a stale base version is a 409 node error; Continue On Fail gives it as an item', async () => {
		const parameters = {
			resource: 'session',
			operation: 'update',
			sessionId,
			versionCheck: 'version',
			baseVersion: 1,
			updateFields: { progressPercentage: 10 },
		};
		await rejects(run(agent, [{}], parameters), '409', /409/);
		const [item] = await run(agent, [{}], parameters, { continueOnFail: true });
		assert.deepEqual(Object.keys(item.json), ['error'], 'one key: what n8n routes to the error output');
		assert.equal(item.json.error.status, 409);
		assert.match(item.json.error.message, /Switchboard answered 409/);
		assert.equal(item.json.error.problem.current_version, 2);
		const session = await runOne(agent, { resource: 'session', operation: 'get', sessionId });
		assert.equal(session.progress_percentage, 40, 'nothing written');
	});

	test('a stale write to other paths is merged three-way when asked (Prefer: merge=auto)', async () => {
		const stale = {
			resource: 'session',
			operation: 'update',
			sessionId,
			versionCheck: 'version',
			baseVersion: 1,
			updateFields: { priority: 'urgent' }, // version 2 changed progress and state only
		};
		await rejects(run(agent, [{}], { ...stale, staleWrite: 'strict' }), '409');
		const merged = await runOne(agent, { ...stale, staleWrite: 'auto' });
		assert.equal(merged.version, 3);
		assert.equal(merged.priority, 'urgent');
		assert.equal(merged.progress_percentage, 40, "version 2's change is kept");
		const back = await runOne(agent, {
			resource: 'session',
			operation: 'update',
			sessionId,
			versionCheck: 'any',
			updateFields: { priority: 'high' },
		});
		assert.equal(back.version, 4);
	});

	test('replace mode drops the state keys it does not name', async () => {
		const replaced = await runOne(agent, {
			resource: 'session',
			operation: 'update',
			sessionId,
			versionCheck: 'version',
			baseVersion: 4,
			mergeMode: 'replace',
			updateFields: { sessionState: '{"active_process": "budget_plan_v2"}' },
		});
		assert.equal(replaced.version, 5);
		assert.equal(replaced.session_state.active_process, 'budget_plan_v2');
		assert.deepEqual(replaced.session_state.agent_outputs, {}, 'removed: back to its empty default');
	});

	test('hand off to a registered agent; an unknown one is a 422 naming to_agent', async () => {
		const handed = await runOne(agent, {
			resource: 'session',
			operation: 'handoff',
			sessionId,
			versionCheck: 'any',
			toAgent: 'Educate_Customer_Agent',
			reason: 'the user asked what a budget is',
			handoffFields: { outputSummary: 'draft plan' },
		});
		assert.equal(handed.current_agent, 'Educate_Customer_Agent');
		assert.equal(handed.version, 6);
		await rejects(
			run(agent, [{}], { resource: 'session', operation: 'handoff', sessionId, toAgent: 'Nobody_Agent', reason: 'x' }),
			'422',
			/to_agent/,
		);
	});

	test('list versions: Return All, and Limit across pages', async () => {
		const all = await run(agent, [{}], { resource: 'session', operation: 'listVersions', sessionId, returnAll: true });
		assert.deepEqual(
			all.map((item) => item.json.version),
			[6, 5, 4, 3, 2, 1],
		);
		const two = await run(agent, [{}], { resource: 'session', operation: 'listVersions', sessionId, returnAll: false, limit: 2 });
		assert.deepEqual(
			two.map((item) => item.json.version),
			[6, 5],
		);
		assert.ok(two.every((item) => item.pairedItem.item === 0));
	});

	test('roll back to version 2 (a new version), touch, complete', async () => {
		const rolled = await runOne(agent, { resource: 'session', operation: 'rollback', sessionId, toVersion: 2 });
		assert.equal(rolled.version, 7);
		assert.equal(rolled.progress_percentage, 40);
		assert.deepEqual(rolled.session_state.agent_outputs, { N8n_Test_Agent: { draft: 1 } });
		const touched = await runOne(agent, { resource: 'session', operation: 'touch', sessionId });
		assert.equal(touched.version, 7, 'a heartbeat is not a version');
		const completed = await runOne(agent, {
			resource: 'session',
			operation: 'complete',
			sessionId,
			outputSummary: 'plan delivered',
		});
		assert.equal(completed.status, 'completed');
	});

	test('every item is processed, each with its own parameters; a failing item fails alone', async () => {
		const users = ['a', 'b', 'c'].map((s) => `batch-${s}-${crypto.randomUUID()}`);
		const output = await run(
			agent,
			users.map((u) => ({ u })),
			(i) => ({
				resource: 'session',
				operation: 'create',
				user: users[i],
				sessionType: i === 1 ? 'no_such_type' : 'consultation',
			}),
			{ continueOnFail: true },
		);
		assert.equal(output.length, 3);
		assert.deepEqual(
			output.map((item) => item.pairedItem.item),
			[0, 1, 2],
		);
		assert.equal(output[0].json.session_type, 'consultation');
		assert.equal(output[1].json.error.status, 422);
		assert.match(output[1].json.error.description, /session_type/);
		assert.equal(output[2].json.session_type, 'consultation');
		assert.notEqual(output[0].json.user_id, output[2].json.user_id);
	});

	test('a session ID that is not a UUID is refused before any request', async () => {
		await assert.rejects(run(agent, [{}], { resource: 'session', operation: 'get', sessionId: 'nope' }), /must be a UUID/);
	});
});

describe('memory', () => {
	const user = `memory-user-${crypto.randomUUID()}`;
	let first;

	test('store, get, and a 422 that names the field', async () => {
		first = await runOne(agent, {
			resource: 'memory',
			operation: 'store',
			user,
			memoryType: 'planning',
			content: '{"goal": "save 10%"}',
			additionalFields: { accessLevel: 'all_agents' },
		});
		assert.equal(first.category, 'agent_outputs', "the type's default category");
		assert.equal(first.agent_name, 'N8n_Test_Agent');
		const got = await runOne(agent, { resource: 'memory', operation: 'get', memoryId: first.memory_id });
		assert.deepEqual(got.content, { goal: 'save 10%' });
		await rejects(
			run(agent, [{}], { resource: 'memory', operation: 'store', user, memoryType: 'Not A Type', content: '{}' }),
			'422',
			/memory_type/,
		);
	});

	test('store by key: create, replace, and "only if new" refuses a second time', async () => {
		const parameters = (content, condition) => ({
			resource: 'memory',
			operation: 'storeByKey',
			user,
			memoryType: 'data_collection',
			category: 'user_profile',
			key: 'risk_profile',
			content,
			additionalFields: condition ? { condition } : {},
		});
		const created = await runOne(agent, parameters({ risk: 'low' }, 'new'));
		assert.equal(created.key, 'risk_profile');
		const replaced = await runOne(agent, parameters({ risk: 'high' }));
		assert.equal(replaced.memory_id, created.memory_id);
		assert.deepEqual(replaced.content, { risk: 'high' });
		const [refused] = await run(agent, [{}], parameters({ risk: 'x' }, 'new'), { continueOnFail: true });
		assert.ok([409, 412].includes(refused.json.error.status), JSON.stringify(refused.json));
	});

	test('search: filters, contains, Return All and Limit', async () => {
		for (let n = 0; n < 3; n++) {
			await runOne(agent, {
				resource: 'memory',
				operation: 'store',
				user,
				memoryType: 'orchestrator',
				content: { note: n, tag: 'search-me' },
			});
		}
		const all = await run(agent, [{}], {
			resource: 'memory',
			operation: 'search',
			filters: { user, contains: '{"tag": "search-me"}' },
			returnAll: true,
		});
		assert.deepEqual(
			all.map((item) => item.json.content.note),
			[2, 1, 0],
		);
		const one = await run(agent, [{}], {
			resource: 'memory',
			operation: 'search',
			filters: { user, category: 'session_data' },
			returnAll: false,
			limit: 1,
		});
		assert.equal(one.length, 1);
		assert.equal(one[0].json.content.note, 2);
	});

	test('delete, then get is a 404 node error', async () => {
		const deleted = await runOne(agent, { resource: 'memory', operation: 'delete', memoryId: first.memory_id });
		assert.deepEqual(deleted, { memory_id: first.memory_id, deleted: true });
		await rejects(run(agent, [{}], { resource: 'memory', operation: 'get', memoryId: first.memory_id }), '404');
	});
});

describe('coordination', () => {
	test("send a message: the coordinator's answer; a repeat of the item is answered once", async () => {
		const parameters = {
			resource: 'coordination',
			operation: 'sendMessage',
			user: `chat-${crypto.randomUUID()}`,
			text: 'I want to make a budget plan',
			additionalFields: { channel: 'telegram' },
		};
		const answer = await runOne(agent, parameters, { executionId: 'exec-a' });
		assert.ok(answer.response);
		assert.ok(answer.session_id);
		assert.ok(answer.decision_id);
		const repeat = await runOne(agent, parameters, { executionId: 'exec-a' });
		assert.equal(repeat.decision_id, answer.decision_id, 'same execution and item: replayed');
		const next = await runOne(agent, parameters, { executionId: 'exec-b' });
		assert.notEqual(next.decision_id, answer.decision_id, 'another execution: a new message');
		assert.equal(next.session_id, answer.session_id, "the user's session continues");
		const elsewhere = await runOne(agent, parameters, { executionId: 'exec-a', instanceId: 'instance-2' });
		assert.notEqual(elsewhere.decision_id, answer.decision_id, 'the same execution id on another n8n');
	});

	test('two items of one execution are two messages', async () => {
		const output = await run(agent, [{}, {}], (i) => ({
			resource: 'coordination',
			operation: 'sendMessage',
			user: `pair-${i}-${crypto.randomUUID()}`,
			text: 'hello there',
		}));
		assert.equal(output.length, 2);
		assert.notEqual(output[0].json.decision_id, output[1].json.decision_id);
	});
});

describe('tasks', () => {
	// A real agent on 127.0.0.1: answers every call as Switchboard's agents do.
	const calls = [];
	let server;
	let sessionId;
	const agentName = 'Task_Echo_Agent';

	before(async () => {
		server = http.createServer((req, res) => {
			const chunks = [];
			req.on('data', (c) => chunks.push(c));
			req.on('end', () => {
				calls.push(JSON.parse(Buffer.concat(chunks).toString() || '{}'));
				res.writeHead(200, { 'content-type': 'application/json' });
				res.end(JSON.stringify({ success: true, output_data: { response: 'done by the echo agent' } }));
			});
		});
		const port = await freePort();
		await new Promise((r) => server.listen(port, '127.0.0.1', r));
		const registered = await sb.request('POST', '/v1/agents', sb.adminKey, {
			name: agentName,
			url: `http://127.0.0.1:${port}`,
			timeout_ms: 2000,
			fail_max: 1000,
		});
		assert.equal(registered.status, 201, JSON.stringify(registered.body));
		const created = await runOne(agent, { resource: 'session', operation: 'create', user: `tasks-${crypto.randomUUID()}` });
		sessionId = created.session_id;
	});

	after(async () => {
		if (server) await new Promise((r) => server.close(r));
	});

	let doneId;
	let queuedId;

	test('submit (once per item however often retried), get, wait until completed', async () => {
		const parameters = {
			resource: 'coordination',
			operation: 'submitTask',
			agentName,
			input: '{"message": "plan the week"}',
			taskFields: { sessionId, priority: 7 },
		};
		const submitted = await runOne(agent, parameters);
		assert.equal(submitted.agent_name, agentName);
		assert.equal(submitted.session_id, sessionId);
		assert.equal(submitted.priority, 7);
		assert.match(submitted.idempotency_key, /^n8n:instance-1:workflow-1:execution-1:node-1:0$/);
		const retried = await runOne(agent, parameters);
		assert.equal(retried.task_id, submitted.task_id, 'the same execution and item is the same task');
		doneId = submitted.task_id;

		const got = await runOne(agent, { resource: 'coordination', operation: 'getTask', taskId: doneId });
		assert.equal(got.task.task_id, doneId);
		assert.ok(Array.isArray(got.transitions) && got.transitions[0].to_status === 'submitted');

		const waited = await runOne(agent, {
			resource: 'coordination',
			operation: 'waitTask',
			taskId: doneId,
			timeout: 30,
			pollInterval: 0.2,
		});
		assert.equal(waited.task.status, 'completed', JSON.stringify(waited.task));
		assert.equal(waited.task.result.output_data.response, 'done by the echo agent');
		assert.equal(waited.transitions.at(-1).to_status, 'completed');
		assert.ok(calls.some((c) => JSON.stringify(c).includes('plan the week')), JSON.stringify(calls));
	});

	test('wait times out on a queued task: the task as it is, or a node error when asked', async () => {
		const later = new Date(Date.now() + 3_600_000).toISOString();
		const queued = await runOne(
			agent,
			{
				resource: 'coordination',
				operation: 'submitTask',
				agentName,
				input: { message: 'not before an hour' },
				taskFields: { sessionId, scheduledAt: later },
			},
			{ executionId: 'execution-queued' },
		);
		assert.equal(queued.status, 'submitted');
		queuedId = queued.task_id;
		const params = { resource: 'coordination', operation: 'waitTask', taskId: queuedId, timeout: 1, pollInterval: 0.2 };
		const started = Date.now();
		const asIs = await runOne(agent, params);
		const took = Date.now() - started;
		assert.equal(asIs.task.status, 'submitted');
		assert.ok(took >= 1000 && took < 10_000, `waited ${took} ms`);
		await assert.rejects(run(agent, [{}], { ...params, onTimeout: 'fail' }), /is still submitted after 1 s/);
		const [failed] = await run(agent, [{}], { ...params, onTimeout: 'fail' }, { continueOnFail: true });
		assert.match(failed.json.error.message, /still submitted/);
	});

	test("list a session's tasks: Return All and Limit, newest first", async () => {
		const all = (await run(agent, [{}], { resource: 'coordination', operation: 'listTasks', sessionId, returnAll: true })).map(
			(o) => o.json,
		);
		assert.deepEqual(
			all.map((t) => t.task_id),
			[queuedId, doneId],
		);
		const one = await run(agent, [{}], { resource: 'coordination', operation: 'listTasks', sessionId, returnAll: false, limit: 1 });
		assert.equal(one.length, 1);
		assert.equal(one[0].json.task_id, queuedId);
	});

	test('cancel the queued task with a reason; cancelling it again is a 409 node error', async () => {
		const canceled = await runOne(agent, { resource: 'coordination', operation: 'cancelTask', taskId: queuedId, reason: 'not needed' });
		assert.equal(canceled.status, 'canceled');
		const detail = await runOne(agent, { resource: 'coordination', operation: 'getTask', taskId: queuedId });
		assert.equal(detail.transitions.at(-1).to_status, 'canceled');
		assert.equal(detail.transitions.at(-1).reason, 'not needed');
		await rejects(run(agent, [{}], { resource: 'coordination', operation: 'cancelTask', taskId: queuedId }), '409');
		// A finished task waits no longer: it is returned at once.
		const waited = await runOne(agent, { resource: 'coordination', operation: 'waitTask', taskId: queuedId, timeout: 30 });
		assert.equal(waited.task.status, 'canceled');
	});

	test('a task ID that is not a UUID is refused; an unknown agent is a 404 node error', async () => {
		await assert.rejects(run(agent, [{}], { resource: 'coordination', operation: 'getTask', taskId: 'task-1' }), /Task ID must be a UUID/);
		await rejects(
			run(agent, [{}], { resource: 'coordination', operation: 'submitTask', agentName: 'Nobody_Agent', input: '{}' }),
			'404',
		);
	});
});

describe('job', () => {
	test('dry run and run now (a coordination_manager key); another key gets 403', async () => {
		const dry = await runOne(manager, { resource: 'job', operation: 'dryRun', job: 'inactivity_timeout' });
		assert.ok(JSON.stringify(dry).includes('inactivity_timeout'), JSON.stringify(dry));
		const ran = await runOne(manager, { resource: 'job', operation: 'run', job: 'all' });
		assert.ok(JSON.stringify(ran).includes('expiry_cleanup'), JSON.stringify(ran));
		await rejects(run(agent, [{}], { resource: 'job', operation: 'run', job: 'all' }), '403');
	});
});

describe('dropdowns', () => {
	const load = (name, credentials) => node.methods.loadOptions[name].call(loadOptionsContext(credentials));

	test('memory types, categories, access levels and session types come from the server', async () => {
		assert.ok((await load('getMemoryTypes', agent)).some((o) => o.value === 'planning'));
		assert.ok((await load('getCategories', agent)).some((o) => o.value === 'user_profile'));
		assert.ok((await load('getAccessLevels', agent)).some((o) => o.value === 'all_agents'));
		assert.deepEqual(
			(await load('getSessionTypes', agent)).map((o) => o.value),
			['consultation', 'education', 'multi_agent_chat', 'planning_session'],
		);
	});

	test('agents: the admin sees the registry; jobs: the admin sees each job', async () => {
		const agents = (await load('getAgents', admin)).map((o) => o.value);
		assert.ok(agents.includes('Educate_Customer_Agent'));
		assert.ok(agents.includes('N8n_Test_Agent'));
		const jobs = (await load('getJobs', admin)).map((o) => o.value);
		assert.equal(jobs[0], 'all');
		assert.ok(jobs.includes('expiry_warning'));
		assert.deepEqual(
			(await load('getJobs', agent)).map((o) => o.value),
			['all'],
		);
		await load('getAgents', agent); // an agent key falls back to the skills map, without failing
	});
});

describe('chat memory', () => {
	const memoryNode = new SwitchboardChatMemory();
	const supply = async (credentials, parameters, json) => {
		const { response } = await memoryNode.supplyData.call(supplyDataContext(credentials, parameters, json), 0);
		return response;
	};

	test("two agents with the chat's session id share one conversation, within the window", async () => {
		const chat = { sessionId: `chat-${crypto.randomUUID()}` };
		const parameters = { sessionIdType: 'fromInput', sessionKey: '', contextWindowLength: 2 };
		const first = await supply(agent, parameters, chat);
		await first.saveContext({ input: 'hi, I am Ada' }, { output: 'hello Ada' });
		await first.saveContext({ input: 'make me a budget' }, { output: 'here is a budget' });
		await first.saveContext({ input: 'thanks' }, { output: 'you are welcome' });

		const second = await supply(manager, parameters, chat); // another agent, another key
		const all = await second.chatHistory.getMessages();
		assert.deepEqual(
			all.map((m) => [m.getType(), m.content]),
			[
				['human', 'hi, I am Ada'],
				['ai', 'hello Ada'],
				['human', 'make me a budget'],
				['ai', 'here is a budget'],
				['human', 'thanks'],
				['ai', 'you are welcome'],
			],
		);
		const { chat_history: window } = await second.loadMemoryVariables({});
		assert.deepEqual(
			window.map((m) => m.content),
			['make me a budget', 'here is a budget', 'thanks', 'you are welcome'],
		);

		// The messages are memories of a Switchboard session of the user n8n-chat:<key>.
		const users = await sb.request('GET', `/v1/users?external_ref=n8n-chat:${chat.sessionId}`, sb.adminKey);
		assert.equal(users.status, 200, JSON.stringify(users.body));
		const userId = (users.body.items ?? [users.body])[0].id;
		const stored = await sb.request('GET', `/v1/memories?user_id=${userId}&category=session_data&limit=50`, sb.adminKey);
		assert.equal(stored.body.items.length, 6);
		assert.ok(stored.body.items.every((m) => m.session_id && m.memory_type === 'orchestrator'));

		await second.chatHistory.clear();
		assert.deepEqual(await first.chatHistory.getMessages(), []);
	});

	test('a Switchboard session ID as the key keeps the conversation in that session', async () => {
		const session = await runOne(agent, { resource: 'session', operation: 'create', user: `s-${crypto.randomUUID()}` });
		const memory = await supply(agent, {
			sessionIdType: 'customKey',
			customSessionKey: session.session_id,
			contextWindowLength: 5,
		});
		await memory.saveContext({ input: 'question' }, { output: 'answer' });
		const stored = await sb.request('GET', `/v1/memories?session_id=${session.session_id}`, sb.adminKey);
		assert.equal(stored.body.items.length, 2);
		assert.ok(stored.body.items.every((m) => m.user_id === session.user_id));
	});

	test("a Chat Trigger's UUID that names no Switchboard session is a chat key", async () => {
		const chat = { sessionId: crypto.randomUUID() };
		const parameters = { sessionIdType: 'fromInput', sessionKey: '', contextWindowLength: 5 };
		const memory = await supply(agent, parameters, chat);
		await memory.saveContext({ input: 'ping' }, { output: 'pong' });
		const again = await supply(manager, parameters, chat);
		assert.deepEqual(
			(await again.chatHistory.getMessages()).map((m) => m.content),
			['ping', 'pong'],
		);
		const users = await sb.request('GET', `/v1/users?external_ref=n8n-chat:${chat.sessionId}`, sb.adminKey);
		assert.equal(users.status, 200, JSON.stringify(users.body));
	});

	test('no session id is a node error naming it', async () => {
		await assert.rejects(supply(agent, { sessionIdType: 'fromInput', sessionKey: '', contextWindowLength: 5 }, {}), /No session ID/);
	});
});

describe('trigger', () => {
	const trigger = new SwitchboardTrigger();
	const methods = trigger.webhookMethods.default;

	test('subscribes on activation, receives a real signed event, refuses a forged one, unsubscribes', async () => {
		const received = [];
		const server = http.createServer((req, res) => {
			const chunks = [];
			req.on('data', (c) => chunks.push(c));
			req.on('end', () => {
				received.push({ headers: req.headers, rawBody: Buffer.concat(chunks) });
				res.writeHead(204).end();
			});
		});
		const port = await freePort();
		await new Promise((r) => server.listen(port, '127.0.0.1', r));
		try {
			const url = `http://127.0.0.1:${port}/webhook/switchboard-events`;
			const { hook, webhook, staticData } = triggerContexts(admin, { events: ['session.expiring'], options: {} }, url);
			assert.equal(await methods.checkExists.call(hook), false);
			assert.equal(await methods.create.call(hook), true);
			assert.ok(staticData.subscriptionId);
			assert.equal(await methods.checkExists.call(hook), true);
			const listed = await sb.request('GET', '/v1/subscriptions', sb.adminKey);
			assert.ok(listed.body.some((s) => s.subscription_id === staticData.subscriptionId && s.url === url));

			// A real event: a session expiring within the warning window, announced by its job.
			const session = await runOne(agent, {
				resource: 'session',
				operation: 'create',
				user: `expiring-${crypto.randomUUID()}`,
				additionalFields: { ttlSeconds: 120 },
			});
			const job = await sb.request('POST', '/v1/jobs/expiry_warning/run', sb.adminKey);
			assert.equal(job.status, 200, JSON.stringify(job.body));
			const deadline = Date.now() + 30_000;
			while (received.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
			assert.equal(received.length, 1, 'one delivery');

			const { context, response } = webhook(received[0]);
			const result = await trigger.webhook.call(context);
			const [[item]] = result.workflowData;
			assert.equal(item.json.event_type, 'session.expiring');
			assert.equal(item.json.payload.session_id, session.session_id);
			assert.equal(item.json.delivery.event_id, received[0].headers['x-switchboard-event-id']);
			assert.equal(response.statusCode, 200);

			const forged = { ...received[0], rawBody: Buffer.from(received[0].rawBody.toString().replace('expiring', 'expired')) };
			const refused = webhook(forged);
			const answer = await trigger.webhook.call(refused.context);
			assert.deepEqual(answer, { noWebhookResponse: true });
			assert.equal(refused.response.statusCode, 401);

			assert.equal(await methods.delete.call(hook), true);
			const after = await sb.request('GET', '/v1/subscriptions', sb.adminKey);
			assert.ok(!after.body.some((s) => s.subscription_id === staticData.subscriptionId || s.url === url));
			assert.equal(staticData.subscriptionId, undefined);
		} finally {
			server.close();
		}
	});

	test("offers exactly the server's event types (EVENT_TYPES), task.dead_lettered among them", async () => {
		const { execFileSync } = require('node:child_process');
		const path = require('node:path');
		const repo = path.resolve(__dirname, '..', '..');
		const python = path.join(process.env.SWITCHBOARD_BIN_DIR || path.join(repo, '.venv', 'bin'), 'python');
		const code = 'import json\nfrom app.events.schemas import EVENT_TYPES\nprint(json.dumps(list(EVENT_TYPES)))';
		const expected = JSON.parse(execFileSync(python, ['-c', code], { cwd: repo, encoding: 'utf8' }));
		assert.ok(expected.includes('task.dead_lettered'));
		const offered = await trigger.methods.loadOptions.getEventTypes.call(loadOptionsContext(admin));
		assert.deepEqual(offered.map((o) => o.value).sort(), [...expected].sort());
	});

	test('the signature check is the scheme of app/events/signing.py', () => {
		const body = Buffer.from('{"a":1}');
		const signature = `v1=${crypto.createHmac('sha256', 's'.repeat(16)).update('1700000000.{"a":1}').digest('hex')}`;
		assert.equal(signatureIsValid('s'.repeat(16), '1700000000', body, signature), true);
		assert.equal(signatureIsValid('s'.repeat(16), '1700000001', body, signature), false);
		assert.equal(signatureIsValid('t'.repeat(16), '1700000000', body, signature), false);
	});
});
