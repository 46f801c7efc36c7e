import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

import type {
	IDataObject,
	IHookFunctions,
	ILoadOptionsFunctions,
	INodePropertyOptions,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
	NodeApiError,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

import { openApiEnum, options, switchboardApi } from '../Switchboard/GenericFunctions';

/**
 * Switchboard's signature: `X-Switchboard-Signature: v1=<hex HMAC-SHA256(secret,
 * "<X-Switchboard-Timestamp>.<body>")>` over the raw body (app/events/signing.py).
 */
export function signatureIsValid(secret: string, timestamp: string, body: Buffer, signature: string): boolean {
	const expected = Buffer.from(
		`v1=${createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex')}`,
	);
	const given = Buffer.from(signature);
	return given.length === expected.length && timingSafeEqual(given, expected);
}

async function eventTypes(ctx: IHookFunctions): Promise<string[]> {
	const chosen = ctx.getNodeParameter('events', []) as string[];
	return chosen.length > 0 ? chosen : await openApiEnum.call(ctx, 'SubscriptionCreate', 'event_types');
}

export class SwitchboardTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Switchboard Trigger',
		name: 'switchboardTrigger',
		icon: 'file:switchboard.svg',
		group: ['trigger'],
		version: 1,
		subtitle: '={{$parameter["events"].join(", ") || "all events"}}',
		description: 'Starts the workflow when Switchboard sends an event (a session expiring, expired, archived, restored; memories purged; a task dead-lettered)',
		defaults: { name: 'Switchboard Trigger' },
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		credentials: [{ name: 'switchboardApi', required: true }],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				responseMode: 'onReceived',
				path: 'webhook',
			},
		],
		properties: [
			{
				displayName:
					"Subscribing needs Switchboard's admin key in the credential, and Switchboard must be allowed to reach n8n's webhook URL (SWITCHBOARD_OUTBOUND_*)",
				name: 'notice',
				type: 'notice',
				default: '',
			},
			{
				displayName: 'Event Names or IDs',
				name: 'events',
				type: 'multiOptions',
				typeOptions: { loadOptionsMethod: 'getEventTypes' },
				default: [],
				description:
					'The events that start the workflow; none chosen means all of them. Choose from the list, or specify IDs using an <a href="https://docs.n8n.io/code-examples/expressions/">expression</a>.',
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{
						displayName: 'Max Age (Seconds)',
						name: 'maxAge',
						type: 'number',
						typeOptions: { minValue: 0 },
						default: 300,
						description:
							'A delivery whose signed timestamp is older (or further in the future) is refused, so a recorded request cannot be replayed later. 0 turns the check off.',
					},
				],
			},
		],
	};

	methods = {
		loadOptions: {
			async getEventTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return options(await openApiEnum.call(this, 'SubscriptionCreate', 'event_types'));
			},
		},
	};

	webhookMethods = {
		default: {
			async checkExists(this: IHookFunctions): Promise<boolean> {
				const data = this.getWorkflowStaticData('node');
				if (!data.subscriptionId || !data.secret) return false;
				const subscriptions = (await switchboardApi.call(this, { method: 'GET', path: '/v1/subscriptions' })) as unknown as IDataObject[];
				const url = this.getNodeWebhookUrl('default');
				const wanted = [...(await eventTypes(this))].sort().join(',');
				const found = subscriptions.find((s) => s.subscription_id === data.subscriptionId);
				if (found && found.url === url && [...(found.event_types as string[])].sort().join(',') === wanted) {
					return true;
				}
				if (found) {
					// Another URL or other events: replaced by create.
					await switchboardApi.call(this, { method: 'DELETE', path: `/v1/subscriptions/${String(data.subscriptionId)}` });
				}
				delete data.subscriptionId;
				delete data.secret;
				return false;
			},
			async create(this: IHookFunctions): Promise<boolean> {
				const data = this.getWorkflowStaticData('node');
				const secret = randomBytes(32).toString('hex');
				const created = await switchboardApi.call(this, {
					method: 'POST',
					path: '/v1/subscriptions',
					body: { url: this.getNodeWebhookUrl('default'), event_types: await eventTypes(this), secret },
				});
				data.subscriptionId = created.subscription_id ?? (created.subscription as IDataObject)?.subscription_id;
				data.secret = secret;
				return true;
			},
			async delete(this: IHookFunctions): Promise<boolean> {
				const data = this.getWorkflowStaticData('node');
				if (data.subscriptionId) {
					try {
						await switchboardApi.call(this, { method: 'DELETE', path: `/v1/subscriptions/${String(data.subscriptionId)}` });
					} catch (error) {
						if ((error as NodeApiError).httpCode !== '404') return false;
					}
				}
				delete data.subscriptionId;
				delete data.secret;
				return true;
			},
		},
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const data = this.getWorkflowStaticData('node');
		const request = this.getRequestObject() as unknown as { rawBody?: Buffer; body?: unknown };
		const headers = this.getHeaderData() as IDataObject;
		const response = this.getResponseObject();
		const refuse = (reason: string): IWebhookResponseData => {
			response.status(401).json({ error: reason });
			return { noWebhookResponse: true };
		};
		const timestamp = String(headers['x-switchboard-timestamp'] ?? '');
		const signature = String(headers['x-switchboard-signature'] ?? '');
		const raw = request.rawBody ?? Buffer.from(JSON.stringify(request.body ?? {}));
		if (!data.secret || !timestamp || !signature) return refuse('unsigned');
		if (!signatureIsValid(String(data.secret), timestamp, raw, signature)) return refuse('bad signature');
		const maxAge = Number((this.getNodeParameter('options', {}) as IDataObject).maxAge ?? 300);
		if (maxAge > 0 && Math.abs(Date.now() / 1000 - Number(timestamp)) > maxAge) return refuse('stale timestamp');
		const event = this.getBodyData();
		return {
			workflowData: [
				[
					{
						json: {
							...event,
							delivery: {
								event_id: headers['x-switchboard-event-id'],
								timestamp: Number(timestamp),
							},
						},
					},
				],
			],
		};
	}
}
