import type {
	IDataObject,
	IExecuteFunctions,
	IHookFunctions,
	IHttpRequestMethods,
	IHttpRequestOptions,
	ILoadOptionsFunctions,
	INodePropertyOptions,
	ISupplyDataFunctions,
	IWebhookFunctions,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

export type SwitchboardContext =
	| IExecuteFunctions
	| IHookFunctions
	| ILoadOptionsFunctions
	| ISupplyDataFunctions
	| IWebhookFunctions;

export interface SwitchboardRequest {
	method: IHttpRequestMethods;
	path: string;
	body?: unknown;
	qs?: IDataObject;
	headers?: IDataObject;
	contentType?: string;
	itemIndex?: number;
}

export interface SwitchboardResponse {
	status: number;
	headers: IDataObject;
	body: unknown;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
	return UUID.test(value);
}

export async function baseUrl(this: SwitchboardContext): Promise<string> {
	const credentials = await this.getCredentials('switchboardApi');
	return String(credentials.baseUrl ?? '').replace(/\/+$/, '');
}

function parse(body: unknown): unknown {
	if (typeof body !== 'string' || body === '') return body === '' ? undefined : body;
	try {
		return JSON.parse(body);
	} catch {
		return body;
	}
}

/**
 * What a problem+json answer says, as one line: its detail, then each field and its message
 * (the `errors` of a 400/409/413/422), so the node's error names the offending field.
 */
export function problemMessage(status: number, body: unknown): { message: string; description: string } {
	const problem = (body && typeof body === 'object' ? body : {}) as IDataObject;
	const title = String(problem.title ?? `HTTP ${status}`);
	const detail = problem.detail ? String(problem.detail) : '';
	const fields = Array.isArray(problem.errors)
		? (problem.errors as IDataObject[]).map((e) => `${String(e.field ?? '?')}: ${String(e.message ?? '')}`)
		: [];
	const message = `Switchboard answered ${status} ${title}${detail ? `: ${detail}` : ''}`;
	const description = [
		...fields,
		problem.trace_id ? `trace id ${String(problem.trace_id)}` : '',
		typeof body === 'string' ? body.slice(0, 500) : '',
	]
		.filter((line) => line)
		.join('\n');
	return { message, description };
}

/**
 * One call to Switchboard with the credential's key. A 4xx/5xx answer becomes a NodeApiError
 * carrying the status (httpCode), the problem's detail and its field messages.
 */
export async function switchboardRequest(
	this: SwitchboardContext,
	request: SwitchboardRequest,
): Promise<SwitchboardResponse> {
	const headers: IDataObject = { accept: 'application/json, application/problem+json', ...request.headers };
	const options: IHttpRequestOptions = {
		method: request.method,
		url: `${await baseUrl.call(this)}${request.path}`,
		qs: request.qs,
		headers,
		json: true,
		returnFullResponse: true,
		ignoreHttpStatusErrors: true,
	};
	if (request.body !== undefined) {
		// Sent as text so the content type stays what Switchboard expects (merge patches).
		headers['content-type'] = request.contentType ?? 'application/json';
		options.body = JSON.stringify(request.body);
		options.json = false;
	}
	let response: { statusCode?: number; status?: number; headers?: IDataObject; body?: unknown };
	try {
		response = await this.helpers.httpRequestWithAuthentication.call(this, 'switchboardApi', options);
	} catch (error) {
		throw new NodeApiError(this.getNode(), error as JsonObject, {
			message: `Switchboard could not be reached at ${options.url}`,
			itemIndex: request.itemIndex,
		});
	}
	const status = Number(response.statusCode ?? response.status ?? 0);
	const body = parse(response.body);
	if (status >= 400 || status === 0) {
		const { message, description } = problemMessage(status, body);
		const errorBody = (body && typeof body === 'object' ? body : { body }) as JsonObject;
		throw new NodeApiError(this.getNode(), errorBody, {
			message,
			description,
			httpCode: String(status),
			itemIndex: request.itemIndex,
		});
	}
	return { status, headers: (response.headers ?? {}) as IDataObject, body };
}

/** The answer's body only. */
export async function switchboardApi(
	this: SwitchboardContext,
	request: SwitchboardRequest,
): Promise<IDataObject> {
	const response = await switchboardRequest.call(this, request);
	return (response.body ?? {}) as IDataObject;
}

/**
 * A paginated list (`{items, next_cursor}`): every page with Return All, else up to `limit`.
 */
export async function switchboardList(
	this: SwitchboardContext,
	request: SwitchboardRequest,
	returnAll: boolean,
	limit: number,
): Promise<IDataObject[]> {
	const items: IDataObject[] = [];
	let cursor: string | undefined;
	do {
		const pageSize = returnAll ? 200 : Math.min(200, limit - items.length);
		const qs: IDataObject = { ...request.qs, limit: pageSize };
		if (cursor) qs.cursor = cursor;
		const page = await switchboardApi.call(this, { ...request, qs });
		items.push(...((page.items as IDataObject[]) ?? []));
		cursor = (page.next_cursor as string | null) ?? undefined;
	} while (cursor && (returnAll || items.length < limit));
	return returnAll ? items : items.slice(0, limit);
}

/**
 * Switchboard's id for a user: a UUID is taken as it is; anything else is your own id for
 * them (`external_ref`), created on first use as the n8n webhooks do.
 */
export async function userId(this: SwitchboardContext, user: string, itemIndex?: number): Promise<string> {
	if (isUuid(user)) return user;
	const response = await switchboardRequest
		.call(this, { method: 'POST', path: '/v1/users', body: { external_ref: user }, itemIndex })
		.catch((error: NodeApiError) => {
			const existing = (error.errorResponse as IDataObject | undefined)?.existing_user_id;
			if (error.httpCode === '409' && existing) return { body: { id: existing } } as SwitchboardResponse;
			throw error;
		});
	return String((response.body as IDataObject).id);
}

/** Names as dropdown options. */
export function options(names: string[], descriptions: Record<string, string> = {}): INodePropertyOptions[] {
	return [...new Set(names)]
		.sort((a, b) => a.localeCompare(b))
		.map((name) => ({ name, value: name, description: descriptions[name] }));
}

/** A component's enum from Switchboard's own OpenAPI document (types that are not tables). */
export async function openApiEnum(
	this: SwitchboardContext,
	schema: string,
	property: string,
): Promise<string[]> {
	const document = await switchboardApi.call(this, { method: 'GET', path: '/schema/openapi.json' });
	const components = (document.components as IDataObject)?.schemas as IDataObject;
	const found = ((components?.[schema] as IDataObject)?.properties as IDataObject)?.[property] as IDataObject;
	const items = (found?.items as IDataObject) ?? found;
	const candidates = [items, ...(((items?.oneOf ?? items?.anyOf) as IDataObject[]) ?? [])];
	for (const candidate of candidates) {
		if (Array.isArray(candidate?.enum)) return candidate.enum as string[];
		const ref = candidate?.$ref as string | undefined;
		if (ref) {
			const target = components?.[ref.split('/').pop() as string] as IDataObject;
			if (Array.isArray(target?.enum)) return target.enum as string[];
		}
	}
	return [];
}

/** Parses a JSON parameter that n8n may hand over as text or as an object already. */
export function jsonParameter(value: unknown, name: string): unknown {
	if (typeof value !== 'string') return value;
	if (value.trim() === '') return undefined;
	try {
		return JSON.parse(value);
	} catch {
		throw new Error(`${name} is not valid JSON`);
	}
}
