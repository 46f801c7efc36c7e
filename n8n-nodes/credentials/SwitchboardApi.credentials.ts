import type {
	IAuthenticateGeneric,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

export class SwitchboardApi implements ICredentialType {
	name = 'switchboardApi';

	displayName = 'Switchboard API';

	icon = 'file:switchboard.svg' as const;

	documentationUrl = 'https://github.com/switchboard/switchboard/tree/main/n8n-nodes#credential';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:8080',
			placeholder: 'http://switchboard.internal:8080',
			description: 'Where n8n reaches Switchboard, without a trailing slash',
			required: true,
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				"An agent's key (switchboard agents create NAME --role coordination_manager) or the admin key; sent as X-API-Key",
			required: true,
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				'X-API-Key': '={{$credentials.apiKey}}',
			},
		},
	};

	// n8n sends one request when the credential is saved. GET /v1/memory-types needs a valid
	// key and a reachable database (503 otherwise), so it catches a wrong URL, a wrong key and
	// a Switchboard that is up but not ready, which is what GET /ready alone would check.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/memory-types',
			method: 'GET',
		},
	};
}
