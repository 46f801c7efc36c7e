import { BufferWindowMemory } from '@langchain/classic/memory';
import type {
	IDataObject,
	ILoadOptionsFunctions,
	INodePropertyOptions,
	INodeType,
	INodeTypeDescription,
	ISupplyDataFunctions,
	SupplyData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import { openApiEnum, options, switchboardApi } from '../Switchboard/GenericFunctions';
import { SwitchboardChatMessageHistory } from './SwitchboardChatHistory';

/** The chat's session id, as n8n's own memory nodes find it (Chat Trigger, or a key). */
function sessionKey(ctx: ISupplyDataFunctions, itemIndex: number): string {
	let key: unknown;
	if (ctx.getNodeParameter('sessionIdType', itemIndex) === 'fromInput') {
		key = ctx.getNodeParameter('sessionKey', itemIndex, '');
		if (!key) {
			try {
				key = ctx.evaluateExpression('{{ $json.sessionId }}', itemIndex);
			} catch {
				key = undefined;
			}
		}
		if (!key) {
			throw new NodeOperationError(ctx.getNode(), 'No session ID found', {
				description:
					"Expected to find the session ID in an input field called 'sessionId' (what the Chat Trigger outputs). To use something else, set Session ID to 'Define below'.",
				itemIndex,
			});
		}
	} else {
		key = ctx.getNodeParameter('customSessionKey', itemIndex, '');
		if (!key) {
			throw new NodeOperationError(ctx.getNode(), 'Key parameter is empty', { itemIndex });
		}
	}
	return String(key);
}

export class SwitchboardChatMemory implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Switchboard Chat Memory',
		name: 'switchboardChatMemory',
		icon: 'file:switchboard.svg',
		group: ['transform'],
		version: 1,
		description: "Keeps the chat history in a Switchboard session, shared by every agent that uses the same key",
		defaults: { name: 'Switchboard Chat Memory' },
		credentials: [{ name: 'switchboardApi', required: true }],
		codex: {
			categories: ['AI'],
			subcategories: { AI: ['Memory'], Memory: ['Other memories'] },
			resources: {
				primaryDocumentation: [{ url: 'https://github.com/switchboard/switchboard/tree/main/n8n-nodes#chat-memory' }],
			},
		},
		inputs: [],
		outputs: [NodeConnectionTypes.AiMemory],
		outputNames: ['Memory'],
		properties: [
			{
				displayName: 'Session ID',
				name: 'sessionIdType',
				type: 'options',
				options: [
					{
						name: 'Connected Chat Trigger Node',
						value: 'fromInput',
						description: "Looks for an input field called 'sessionId' that is coming from a directly connected Chat Trigger",
					},
					{
						name: 'Define Below',
						value: 'customKey',
						description: 'Use an expression to reference data in previous nodes or enter static text',
					},
				],
				default: 'fromInput',
			},
			{
				displayName: 'Session Key From Previous Node',
				name: 'sessionKey',
				type: 'string',
				default: '={{ $json.sessionId }}',
				displayOptions: { show: { sessionIdType: ['fromInput'] } },
			},
			{
				displayName: 'Key',
				name: 'customSessionKey',
				type: 'string',
				default: '',
				description:
					'A Switchboard session ID (the conversation is kept in that session), or any text: the conversation of that key',
				displayOptions: { show: { sessionIdType: ['customKey'] } },
			},
			{
				displayName: 'Context Window Length',
				name: 'contextWindowLength',
				type: 'number',
				typeOptions: { minValue: 1 },
				default: 5,
				hint: 'How many past interactions the model receives as context',
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{
						displayName: 'Category Name or ID',
						name: 'category',
						type: 'options',
						typeOptions: { loadOptionsMethod: 'getCategories' },
						default: '',
						description:
							'Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code-examples/expressions/">expression</a>',
					},
					{
						displayName: 'Max Messages Read',
						name: 'maxMessages',
						type: 'number',
						typeOptions: { minValue: 1 },
						default: 1000,
						description: 'The newest messages read back for the Chat Memory Manager (the AI Agent sees only the context window)',
					},
					{
						displayName: 'Memory Type Name or ID',
						name: 'memoryType',
						type: 'options',
						typeOptions: { loadOptionsMethod: 'getMemoryTypes' },
						default: '',
						description:
							'Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code-examples/expressions/">expression</a>',
					},
					{
						displayName: 'Session Type Name or ID',
						name: 'sessionType',
						type: 'options',
						typeOptions: { loadOptionsMethod: 'getSessionTypes' },
						default: '',
						description:
							'Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code-examples/expressions/">expression</a>',
					},
				],
			},
		],
	};

	methods = {
		loadOptions: {
			async getCategories(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				const categories = (await switchboardApi.call(this, { method: 'GET', path: '/v1/memory-categories' })) as unknown as IDataObject[];
				return options(categories.map((c) => String(c.name)), Object.fromEntries(categories.map((c) => [String(c.name), String(c.description)])));
			},
			async getMemoryTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				const types = (await switchboardApi.call(this, { method: 'GET', path: '/v1/memory-types' })) as unknown as IDataObject[];
				return options(types.map((t) => String(t.name)), Object.fromEntries(types.map((t) => [String(t.name), String(t.description)])));
			},
			async getSessionTypes(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
				return options(await openApiEnum.call(this, 'SessionCreate', 'session_type'));
			},
		},
	};

	async supplyData(this: ISupplyDataFunctions, itemIndex: number): Promise<SupplyData> {
		const extra = this.getNodeParameter('options', itemIndex, {}) as IDataObject;
		const chatHistory = new SwitchboardChatMessageHistory(this, {
			sessionKey: sessionKey(this, itemIndex),
			category: String(extra.category || 'session_data'),
			memoryType: String(extra.memoryType || 'orchestrator'),
			sessionType: String(extra.sessionType || 'multi_agent_chat'),
			maxMessages: Number(extra.maxMessages || 1000),
		});
		const memory = new BufferWindowMemory({
			memoryKey: 'chat_history',
			chatHistory,
			returnMessages: true,
			inputKey: 'input',
			outputKey: 'output',
			k: this.getNodeParameter('contextWindowLength', itemIndex, 5) as number,
		});
		return { response: memory };
	}
}
