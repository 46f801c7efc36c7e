import type {
	IDataObject,
	IExecuteFunctions,
	ILoadOptionsFunctions,
	INodeExecutionData,
	INodePropertyOptions,
	INodeType,
	INodeTypeDescription,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError, sleep } from 'n8n-workflow';

import {
	coordinationProperties,
	jobProperties,
	memoryProperties,
	resourceProperty,
	sessionProperties,
} from './descriptions';
import {
	isUuid,
	jsonParameter,
	openApiEnum,
	options,
	switchboardApi,
	switchboardList,
	switchboardRequest,
	userId,
} from './GenericFunctions';

/** A task in one of these is over (app/tasks/schemas.py TERMINAL_STATUSES). */
const TERMINAL_TASK_STATUSES = new Set(['completed', 'failed', 'canceled', 'rejected']);

type Operation = (this: IExecuteFunctions, i: number) => Promise<IDataObject | IDataObject[]>;

function parameter<T>(ctx: IExecuteFunctions, name: string, i: number, fallback?: T): T {
	return ctx.getNodeParameter(name, i, fallback) as T;
}

function uuidParameter(ctx: IExecuteFunctions, name: string, i: number, label: string): string {
	const value = String(parameter<string>(ctx, name, i)).trim();
	if (!isUuid(value)) {
		throw new NodeOperationError(ctx.getNode(), `${label} must be a UUID, got "${value}"`, { itemIndex: i });
	}
	return value;
}

function jsonField(ctx: IExecuteFunctions, value: unknown, name: string, i: number): IDataObject {
	try {
		return jsonParameter(value, name) as IDataObject;
	} catch (error) {
		throw new NodeOperationError(ctx.getNode(), (error as Error).message, { itemIndex: i });
	}
}

/** The If-Match a session write sends, as chosen in Version Check. */
async function ifMatch(ctx: IExecuteFunctions, sessionId: string, i: number): Promise<string> {
	const check = parameter<string>(ctx, 'versionCheck', i, 'current');
	if (check === 'any') return '*';
	if (check === 'version') return `"${parameter<number>(ctx, 'baseVersion', i)}"`;
	const session = await switchboardApi.call(ctx, { method: 'GET', path: `/v1/sessions/${sessionId}`, itemIndex: i });
	return `"${String(session.version)}"`;
}

/** The If-Match of a session write, and its Prefer: merge=… when one is chosen. */
function writeHeaders(ctx: IExecuteFunctions, match: string, i: number): IDataObject {
	const headers: IDataObject = { 'If-Match': match };
	const stale = parameter<string>(ctx, 'staleWrite', i, 'server');
	if (stale === 'auto' || stale === 'strict') headers.Prefer = `merge=${stale}`;
	return headers;
}

/**
 * The Idempotency-Key of a webhook call: the user's, else one per execution, node and item,
 * so n8n's "Retry On Fail" (or a repeat of the same execution) is answered once. Execution
 * ids start again in a new n8n database and repeat across instances, so the instance id (from
 * the instance's own encryption key) and the workflow id are part of it.
 */
function idempotencyKey(ctx: IExecuteFunctions, given: string, i: number): string {
	if (given) return given;
	const node = ctx.getNode();
	const workflow = ctx.getWorkflow().id ?? 'unsaved';
	return `n8n:${ctx.getInstanceId()}:${workflow}:${ctx.getExecutionId()}:${node.id ?? node.name}:${i}`;
}

const session: Record<string, Operation> = {
	async create(i) {
		const fields = parameter<IDataObject>(this, 'additionalFields', i, {});
		const body: IDataObject = {
			user_id: await userId.call(this, parameter<string>(this, 'user', i), i),
		};
		const sessionType = parameter<string>(this, 'sessionType', i, '');
		if (sessionType) body.session_type = sessionType;
		if (fields.sessionState !== undefined) body.session_state = jsonField(this, fields.sessionState, 'Session State', i);
		if (fields.coordinationMetadata !== undefined) {
			body.coordination_metadata = jsonField(this, fields.coordinationMetadata, 'Coordination Metadata', i);
		}
		if (fields.currentAgent) body.current_agent = fields.currentAgent;
		if (fields.priority) body.priority = fields.priority;
		if (fields.preserve !== undefined) body.preserve = fields.preserve;
		if (fields.ttlSeconds !== undefined) body.ttl_seconds = fields.ttlSeconds;
		return await switchboardApi.call(this, { method: 'POST', path: '/v1/sessions', body, itemIndex: i });
	},
	async get(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		return await switchboardApi.call(this, { method: 'GET', path: `/v1/sessions/${id}`, itemIndex: i });
	},
	async update(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		const fields = parameter<IDataObject>(this, 'updateFields', i, {});
		const patch: IDataObject = {};
		if (fields.sessionState !== undefined) patch.session_state = jsonField(this, fields.sessionState, 'Session State', i);
		if (fields.coordinationMetadata !== undefined) {
			patch.coordination_metadata = jsonField(this, fields.coordinationMetadata, 'Coordination Metadata', i);
		}
		for (const [field, name] of [
			['progressPercentage', 'progress_percentage'],
			['priority', 'priority'],
			['currentAgent', 'current_agent'],
			['preserve', 'preserve'],
			['status', 'status'],
		]) {
			if (fields[field] !== undefined && fields[field] !== '') patch[name] = fields[field];
		}
		const match = await ifMatch(this, id, i);
		if (parameter<string>(this, 'mergeMode', i, 'merge') === 'replace' && patch.session_state !== undefined) {
			// A merge patch keeps keys it does not name: name each key to drop with null.
			const current = await switchboardApi.call(this, { method: 'GET', path: `/v1/sessions/${id}`, itemIndex: i });
			const wanted = (patch.session_state ?? {}) as IDataObject;
			const state: IDataObject = { ...wanted };
			for (const key of Object.keys((current.session_state as IDataObject) ?? {})) {
				if (!(key in wanted)) state[key] = null;
			}
			patch.session_state = state;
		}
		return await switchboardApi.call(this, {
			method: 'PATCH',
			path: `/v1/sessions/${id}`,
			body: patch,
			contentType: 'application/merge-patch+json',
			headers: writeHeaders(this, match, i),
			itemIndex: i,
		});
	},
	async handoff(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		const fields = parameter<IDataObject>(this, 'handoffFields', i, {});
		const body: IDataObject = { to_agent: parameter<string>(this, 'toAgent', i), reason: parameter<string>(this, 'reason', i) };
		if (fields.outcome) body.outcome = fields.outcome;
		if (fields.outputSummary) body.output_summary = fields.outputSummary;
		const headers = writeHeaders(this, await ifMatch(this, id, i), i);
		return await switchboardApi.call(this, { method: 'POST', path: `/v1/sessions/${id}/handoff`, body, headers, itemIndex: i });
	},
	async complete(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		const summary = parameter<string>(this, 'outputSummary', i, '');
		const body: IDataObject = summary ? { output_summary: summary } : {};
		const headers = { 'If-Match': await ifMatch(this, id, i) };
		return await switchboardApi.call(this, { method: 'POST', path: `/v1/sessions/${id}/complete`, body, headers, itemIndex: i });
	},
	async touch(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		return await switchboardApi.call(this, { method: 'POST', path: `/v1/sessions/${id}/touch`, itemIndex: i });
	},
	async listVersions(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		return await switchboardList.call(
			this,
			{ method: 'GET', path: `/v1/sessions/${id}/versions`, itemIndex: i },
			parameter<boolean>(this, 'returnAll', i, false),
			parameter<number>(this, 'limit', i, 50),
		);
	},
	async rollback(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		const body = { to_version: parameter<number>(this, 'toVersion', i) };
		const headers = { 'If-Match': await ifMatch(this, id, i) };
		return await switchboardApi.call(this, { method: 'POST', path: `/v1/sessions/${id}/rollback`, body, headers, itemIndex: i });
	},
};

async function memoryBody(ctx: IExecuteFunctions, i: number, byKey: boolean): Promise<IDataObject> {
	const fields = parameter<IDataObject>(ctx, 'additionalFields', i, {});
	const body: IDataObject = {
		user_id: await userId.call(ctx, parameter<string>(ctx, 'user', i), i),
		memory_type: parameter<string>(ctx, 'memoryType', i),
		content: jsonField(ctx, parameter<unknown>(ctx, 'content', i), 'Content', i),
	};
	if (byKey) {
		body.category = parameter<string>(ctx, 'category', i);
		body.key = parameter<string>(ctx, 'key', i);
	} else {
		if (fields.category) body.category = fields.category;
		if (fields.key) body.key = fields.key;
	}
	if (fields.sessionId) body.session_id = fields.sessionId;
	if (fields.accessLevel) body.access_level = fields.accessLevel;
	return body;
}

const memory: Record<string, Operation> = {
	async store(i) {
		const body = await memoryBody(this, i, false);
		return await switchboardApi.call(this, { method: 'POST', path: '/v1/memories', body, itemIndex: i });
	},
	async storeByKey(i) {
		const body = await memoryBody(this, i, true);
		const fields = parameter<IDataObject>(this, 'additionalFields', i, {});
		const headers: IDataObject = {};
		if (fields.condition === 'new') headers['If-None-Match'] = '*';
		if (fields.condition === 'version') headers['If-Match'] = `"${String(fields.version ?? 1)}"`;
		return await switchboardApi.call(this, { method: 'PUT', path: '/v1/memories/by-key', body, headers, itemIndex: i });
	},
	async get(i) {
		const id = uuidParameter(this, 'memoryId', i, 'Memory ID');
		return await switchboardApi.call(this, { method: 'GET', path: `/v1/memories/${id}`, itemIndex: i });
	},
	async delete(i) {
		const id = uuidParameter(this, 'memoryId', i, 'Memory ID');
		await switchboardApi.call(this, { method: 'DELETE', path: `/v1/memories/${id}`, itemIndex: i });
		return { memory_id: id, deleted: true };
	},
	async search(i) {
		const filters = parameter<IDataObject>(this, 'filters', i, {});
		const qs: IDataObject = {};
		if (filters.user) qs.user_id = await userId.call(this, String(filters.user), i);
		if (filters.sessionId) qs.session_id = filters.sessionId;
		if (filters.agentName) qs.agent_name = filters.agentName;
		if (filters.memoryType) qs.memory_type = filters.memoryType;
		if (filters.category) qs.category = filters.category;
		if (filters.since) qs.since = new Date(String(filters.since)).toISOString();
		if (filters.contains !== undefined) {
			const contains = jsonField(this, filters.contains, 'Contains', i);
			if (contains !== undefined && !(typeof contains === 'object' && contains !== null && Object.keys(contains).length === 0)) {
				qs.contains = JSON.stringify(contains);
			}
		}
		return await switchboardList.call(
			this,
			{ method: 'GET', path: '/v1/memories', qs, itemIndex: i },
			parameter<boolean>(this, 'returnAll', i, false),
			parameter<number>(this, 'limit', i, 50),
		);
	},
};

const coordination: Record<string, Operation> = {
	async sendMessage(i) {
		const fields = parameter<IDataObject>(this, 'additionalFields', i, {});
		const user = String(parameter<string>(this, 'user', i)).trim();
		const body: IDataObject = { text: parameter<string>(this, 'text', i) };
		if (isUuid(user)) body.user_id = user;
		else body.user_ref = user;
		if (fields.sessionId) body.session_id = fields.sessionId;
		if (fields.sessionType) body.session_type = fields.sessionType;
		if (fields.channel) body.channel = fields.channel;
		if (fields.contextFlags) {
			body.context_flags = String(fields.contextFlags)
				.split(',')
				.map((flag) => flag.trim())
				.filter((flag) => flag);
		}
		const key = idempotencyKey(this, String(fields.idempotencyKey ?? ''), i);
		const response = await switchboardRequest.call(this, {
			method: 'POST',
			path: '/webhooks/n8n/coordination',
			body,
			headers: { 'Idempotency-Key': key },
			itemIndex: i,
		});
		return response.body as IDataObject;
	},
	async submitTask(i) {
		const fields = parameter<IDataObject>(this, 'taskFields', i, {});
		const body: IDataObject = {
			agent_name: parameter<string>(this, 'agentName', i),
			input: jsonField(this, parameter<unknown>(this, 'input', i, '{}'), 'Input', i) ?? {},
		};
		if (fields.sessionId) body.session_id = String(fields.sessionId).trim();
		if (fields.userId) body.user_id = fields.userId;
		if (fields.priority !== undefined) body.priority = fields.priority;
		if (fields.maxAttempts !== undefined) body.max_attempts = fields.maxAttempts;
		if (fields.scheduledAt) body.scheduled_at = new Date(String(fields.scheduledAt)).toISOString();
		const key = idempotencyKey(this, String(fields.idempotencyKey ?? ''), i);
		return await switchboardApi.call(this, {
			method: 'POST',
			path: '/v1/tasks',
			body,
			headers: { 'Idempotency-Key': key },
			itemIndex: i,
		});
	},
	async getTask(i) {
		const id = uuidParameter(this, 'taskId', i, 'Task ID');
		return await switchboardApi.call(this, { method: 'GET', path: `/v1/tasks/${id}`, itemIndex: i });
	},
	async waitTask(i) {
		const id = uuidParameter(this, 'taskId', i, 'Task ID');
		const timeoutMs = Math.max(0, Number(parameter<number>(this, 'timeout', i, 60))) * 1000;
		const intervalMs = Math.max(200, Number(parameter<number>(this, 'pollInterval', i, 2)) * 1000);
		const deadline = Date.now() + timeoutMs;
		for (;;) {
			const detail = await switchboardApi.call(this, { method: 'GET', path: `/v1/tasks/${id}`, itemIndex: i });
			const status = String((detail.task as IDataObject | undefined)?.status ?? '');
			if (TERMINAL_TASK_STATUSES.has(status)) return detail;
			const left = deadline - Date.now();
			if (left <= 0) {
				if (parameter<string>(this, 'onTimeout', i, 'output') === 'fail') {
					throw new NodeOperationError(
						this.getNode(),
						`Task ${id} is still ${status} after ${timeoutMs / 1000} s`,
						{ itemIndex: i, description: 'Raise the timeout, or choose On Timeout: Output the Task as It Is' },
					);
				}
				return detail;
			}
			await sleep(Math.min(intervalMs, left));
		}
	},
	async listTasks(i) {
		const id = uuidParameter(this, 'sessionId', i, 'Session ID');
		return await switchboardList.call(
			this,
			{ method: 'GET', path: `/v1/sessions/${id}/tasks`, itemIndex: i },
			parameter<boolean>(this, 'returnAll', i, false),
			parameter<number>(this, 'limit', i, 50),
		);
	},
	async cancelTask(i) {
		const id = uuidParameter(this, 'taskId', i, 'Task ID');
		const reason = String(parameter<string>(this, 'reason', i, '') ?? '');
		return await switchboardApi.call(this, {
			method: 'POST',
			path: `/v1/tasks/${id}/cancel`,
			qs: reason ? { reason } : undefined,
			itemIndex: i,
		});
	},
};

const job: Record<string, Operation> = {
	async run(i) {
		return await runJob(this, i, false);
	},
	async dryRun(i) {
		return await runJob(this, i, true);
	},
};

async function runJob(ctx: IExecuteFunctions, i: number, dryRun: boolean): Promise<IDataObject> {
	const key = idempotencyKey(ctx, parameter<string>(ctx, 'idempotencyKey', i, ''), i);
	return await switchboardApi.call(ctx, {
		method: 'POST',
		path: '/webhooks/n8n/cleanup',
		body: { job: parameter<string>(ctx, 'job', i, '') || 'all', dry_run: dryRun },
		headers: { 'Idempotency-Key': `${key}${dryRun ? ':dry' : ''}` },
		itemIndex: i,
	});
}

const OPERATIONS: Record<string, Record<string, Operation>> = { session, memory, coordination, job };

export class Switchboard implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Switchboard',
		name: 'switchboard',
		icon: 'file:switchboard.svg',
		group: ['transform'],
		version: 1,
		subtitle: '={{$parameter["operation"] + ": " + $parameter["resource"]}}',
		description: 'Sessions, memories, coordination, durable tasks and jobs of Switchboard',
		defaults: { name: 'Switchboard' },
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		usableAsTool: true,
		credentials: [{ name: 'switchboardApi', required: true }],
		properties: [
			resourceProperty,
			...sessionProperties,
			...memoryProperties,
			...coordinationProperties,
			...jobProperties,
		],
	};

	methods = {
		loadOptions: {
			async getAgents(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				// The agent list is the admin's; an agent's key sees the agents through their skills.
				try {
					const agents = (await switchboardApi.call(this, { method: 'GET', path: '/v1/agents' })) as unknown;
					const list = (Array.isArray(agents) ? agents : ((agents as IDataObject).items as IDataObject[])) as IDataObject[];
					return options(list.filter((a) => a.enabled !== false).map((a) => String(a.name)));
				} catch {
					const skills = (await switchboardApi.call(this, { method: 'GET', path: '/v1/skills' })) as unknown;
					const names = ((skills as IDataObject[]) ?? []).flatMap((s) =>
						((s.agents as unknown[]) ?? []).map((a) => String(typeof a === 'object' ? (a as IDataObject).name : a)),
					);
					return options(names);
				}
			},
			async getMemoryTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				const types = (await switchboardApi.call(this, { method: 'GET', path: '/v1/memory-types' })) as unknown as IDataObject[];
				const descriptions = Object.fromEntries(
					types.map((t) => [String(t.name), `${String(t.description)} (category ${String(t.default_category)})`]),
				);
				return options(types.map((t) => String(t.name)), descriptions);
			},
			async getCategories(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				const categories = (await switchboardApi.call(this, { method: 'GET', path: '/v1/memory-categories' })) as unknown as IDataObject[];
				const descriptions = Object.fromEntries(categories.map((c) => [String(c.name), String(c.description)]));
				return options(categories.map((c) => String(c.name)), descriptions);
			},
			async getAccessLevels(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				const levels = (await switchboardApi.call(this, { method: 'GET', path: '/v1/memory-access-levels' })) as unknown as IDataObject[];
				const descriptions = Object.fromEntries(levels.map((l) => [String(l.level), String(l.description)]));
				return options(levels.map((l) => String(l.level)), descriptions);
			},
			async getSessionTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return options(await openApiEnum.call(this, 'SessionCreate', 'session_type'));
			},
			async getJobs(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				// The job list is the admin's; with another key only "all" is offered.
				const all = { name: 'All', value: 'all', description: 'Every maintenance job, in order' };
				try {
					const jobs = (await switchboardApi.call(this, { method: 'GET', path: '/v1/jobs' })) as unknown;
					const list = (Array.isArray(jobs) ? jobs : ((jobs as IDataObject).items as IDataObject[])) as IDataObject[];
					const descriptions = Object.fromEntries(list.map((j) => [String(j.name), String(j.description ?? '')]));
					return [all, ...options(list.map((j) => String(j.name)), descriptions)];
				} catch {
					return [all];
				}
			},
		},
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const returnData: INodeExecutionData[] = [];
		for (let i = 0; i < items.length; i++) {
			try {
				const resource = this.getNodeParameter('resource', i) as string;
				const operation = this.getNodeParameter('operation', i) as string;
				const run = OPERATIONS[resource]?.[operation];
				if (run === undefined) {
					throw new NodeOperationError(this.getNode(), `Unknown operation ${resource}: ${operation}`, { itemIndex: i });
				}
				const result = await run.call(this, i);
				const results = Array.isArray(result) ? result : [result];
				returnData.push(...results.map((json) => ({ json, pairedItem: { item: i } })));
			} catch (error) {
				if (this.continueOnFail()) {
					// As n8n's HTTP Request node does: one key, `error`, an object. One key is also
					// what n8n routes to the error output under "Continue (using error output)".
					const failure: IDataObject = { message: (error as Error).message };
					const httpCode = (error as { httpCode?: string }).httpCode;
					if (httpCode) failure.status = Number(httpCode);
					const description = (error as { description?: string }).description;
					if (description) failure.description = description;
					// Switchboard's problem+json as sent (a failed cleanup lists its jobs there).
					const problem = (error as { errorResponse?: IDataObject }).errorResponse;
					if (httpCode && problem && typeof problem === 'object') failure.problem = problem;
					returnData.push({ json: { error: failure }, pairedItem: { item: i } });
					continue;
				}
				throw error;
			}
		}
		return [returnData];
	}
}
