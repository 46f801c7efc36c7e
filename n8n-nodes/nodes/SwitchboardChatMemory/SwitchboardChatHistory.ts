import { BaseListChatMessageHistory } from '@langchain/core/chat_history';
import type { BaseMessage, StoredMessage } from '@langchain/core/messages';
import { mapChatMessagesToStoredMessages, mapStoredMessagesToChatMessages } from '@langchain/core/messages';
import type { IDataObject, NodeApiError } from 'n8n-workflow';

import type { SwitchboardContext } from '../Switchboard/GenericFunctions';
import { isUuid, switchboardApi, switchboardList, userId } from '../Switchboard/GenericFunctions';

/** The user a chat key that is not a Switchboard session is kept under (`external_ref`). */
export const CHAT_USER_PREFIX = 'n8n-chat:';

export interface ChatHistoryOptions {
	/** The chat's session key: a Switchboard session ID, or any text (n8n's chat session id). */
	sessionKey: string;
	memoryType: string;
	category: string;
	sessionType: string;
	/** At most this many messages are read back (the newest). */
	maxMessages: number;
}

interface Conversation {
	sessionId: string;
	userId: string;
	/** The key is a Switchboard session's ID: the conversation is that session's. */
	named: boolean;
}

/**
 * A conversation kept in Switchboard. Each message is one memory of the session (category
 * `session_data` by default: current conversation context, readable by all agents, 24 h
 * retention), its content `{"n8n_chat": {"session_key", "position", "message"}}` where
 * `message` is LangChain's stored form. A key that is a Switchboard session's ID is that
 * session; any other key (a UUID that names no session included) is the conversation of the user `n8n-chat:<key>`, in that user's
 * newest open session (one is opened when there is none), so every workflow and agent that
 * uses the same key shares one conversation under Switchboard's access rules and retention.
 */
export class SwitchboardChatMessageHistory extends BaseListChatMessageHistory {
	lc_namespace = ['n8n', 'switchboard', 'chat_history'];

	private conversation?: Conversation;

	constructor(
		private readonly ctx: SwitchboardContext,
		private readonly options: ChatHistoryOptions,
	) {
		super();
	}

	/** The Switchboard session (and its user) this conversation is kept in. */
	async resolve(): Promise<Conversation> {
		if (this.conversation) return this.conversation;
		const key = this.options.sessionKey;
		if (isUuid(key)) {
			// n8n's Chat Trigger makes UUIDs too: a UUID that is no session is a chat key.
			const session = await switchboardApi
				.call(this.ctx, { method: 'GET', path: `/v1/sessions/${key}` })
				.catch((error: NodeApiError) => {
					if (error.httpCode === '404') return undefined;
					throw error;
				});
			if (session) {
				this.conversation = { sessionId: key, userId: String(session.user_id), named: true };
				return this.conversation;
			}
		}
		const user = await userId.call(this.ctx, `${CHAT_USER_PREFIX}${key}`);
		const page = await switchboardApi.call(this.ctx, {
			method: 'GET',
			path: `/v1/users/${user}/sessions`,
			qs: { limit: 20 },
		});
		const open = ((page.items as IDataObject[]) ?? []).find((s) => s.status !== 'completed');
		if (open) {
			this.conversation = { sessionId: String(open.session_id), userId: user, named: false };
			return this.conversation;
		}
		const created = await switchboardApi.call(this.ctx, {
			method: 'POST',
			path: '/v1/sessions',
			body: { user_id: user, session_type: this.options.sessionType },
		});
		this.conversation = { sessionId: String(created.session_id), userId: user, named: false };
		return this.conversation;
	}

	private async stored(): Promise<IDataObject[]> {
		const conversation = await this.resolve();
		const qs: IDataObject = {
			category: this.options.category,
			contains: JSON.stringify({ n8n_chat: { session_key: this.options.sessionKey } }),
		};
		// A named session holds the conversation; a chat key's user holds it across sessions.
		if (conversation.named) qs.session_id = conversation.sessionId;
		else qs.user_id = conversation.userId;
		const newestFirst = await switchboardList.call(
			this.ctx,
			{ method: 'GET', path: '/v1/memories', qs },
			false,
			this.options.maxMessages,
		);
		return newestFirst.sort((a, b) => {
			const at = String(a.created_at).localeCompare(String(b.created_at));
			return at !== 0 ? at : position(a) - position(b);
		});
	}

	async getMessages(): Promise<BaseMessage[]> {
		const memories = await this.stored();
		const messages = memories.map((m) => ((m.content as IDataObject).n8n_chat as IDataObject).message as unknown as StoredMessage);
		return mapStoredMessagesToChatMessages(messages);
	}

	async addMessage(message: BaseMessage): Promise<void> {
		await this.addMessages([message]);
	}

	async addMessages(messages: BaseMessage[]): Promise<void> {
		const conversation = await this.resolve();
		const stored = mapChatMessagesToStoredMessages(messages);
		const now = Date.now() * 1000;
		// Messages added together go in one request, all or nothing.
		const body = stored.map((message, index) => ({
			user_id: conversation.userId,
			session_id: conversation.sessionId,
			memory_type: this.options.memoryType,
			category: this.options.category,
			content: {
				n8n_chat: {
					session_key: this.options.sessionKey,
					position: now + index,
					message: message as unknown as IDataObject,
				},
			},
		}));
		if (body.length === 0) return;
		await switchboardApi.call(this.ctx, { method: 'POST', path: '/v1/memories', body: body.length === 1 ? body[0] : body });
	}

	async clear(): Promise<void> {
		// Page by page: a conversation may be longer than what is read back.
		for (let page = await this.stored(); page.length > 0; page = await this.stored()) {
			for (const memory of page) {
				await switchboardApi.call(this.ctx, { method: 'DELETE', path: `/v1/memories/${String(memory.memory_id)}` });
			}
		}
	}
}

function position(memory: IDataObject): number {
	return Number((((memory.content as IDataObject)?.n8n_chat as IDataObject)?.position as number) ?? 0);
}
