-- Switchboard canonical schema: what `alembic upgrade head` produces on an empty database.
-- tests/migrations checks that the two stay identical; change both in the same commit.

-- Time-ordered UUIDs (RFC 9562 version 7) on PostgreSQL 15-17, which lack uuidv7():
-- the first 48 bits are Unix milliseconds, then the version nibble 7, then random bits
-- taken from a core gen_random_uuid() (whose variant bits are already RFC 9562's).
CREATE FUNCTION uuid_generate_v7() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT encode(
        set_bit(
            set_bit(
                overlay(
                    uuid_send(gen_random_uuid())
                    PLACING substring(
                        int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                        FROM 3)
                    FROM 1 FOR 6),
                52, 1),
            53, 1),
        'hex')::uuid
$$;

CREATE TABLE users (
    id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    external_ref text UNIQUE CHECK (char_length(external_ref) BETWEEN 1 AND 256),
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);

CREATE TABLE session_coordination (
    session_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_type text NOT NULL DEFAULT 'multi_agent_chat'
        CHECK (session_type IN ('multi_agent_chat', 'planning_session', 'consultation', 'education')),
    -- Where the session is in its work. Expiry is not a status: an expired session leaves
    -- for session_archive (revision 0015 removed 'expired', which nothing ever set).
    status text NOT NULL DEFAULT 'active'
        CHECK (status IN ('active', 'idle', 'completed', 'escalated')),
    priority text NOT NULL DEFAULT 'normal'
        CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    current_agent text CHECK (char_length(current_agent) BETWEEN 1 AND 100),
    agent_sequence jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(agent_sequence) = 'array'),
    session_state jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(session_state) = 'object'),
    coordination_metadata jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(coordination_metadata) = 'object'),
    progress_percentage integer NOT NULL DEFAULT 0
        CHECK (progress_percentage BETWEEN 0 AND 100),
    preserve boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    last_activity_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    completed_at timestamptz,
    -- When the user was last told the session is about to expire (NULL: not since it last moved).
    expiry_warned_at timestamptz
);

-- A user's sessions, newest first, with and without a status filter (keyset pagination).
CREATE INDEX session_coordination_user_created_idx
    ON session_coordination (user_id, created_at DESC, session_id DESC);
CREATE INDEX session_coordination_user_status_created_idx
    ON session_coordination (user_id, status, created_at DESC, session_id DESC);
-- Expiry sweeps and warnings only ever look at sessions that cleanup may touch (completed
-- sessions wait for the archival job instead).
CREATE INDEX session_coordination_expiry_idx
    ON session_coordination (expires_at) WHERE NOT preserve AND status <> 'completed';
-- The sweeps' predicates (session_may_lapse) ask whether a session runs a process; without
-- statistics on that expression the planner guesses 0.5 % of sessions match, and with a
-- batch of 20,000 expired among 200,000 it read the whole table and sorted it for every
-- batch instead of walking the expiry index (migration 0031).
CREATE STATISTICS session_coordination_active_process_stats
    ON ((session_state ->> 'active_process')) FROM session_coordination;
-- Inactivity sweeps only ever look at active sessions.
CREATE INDEX session_coordination_activity_idx
    ON session_coordination (last_activity_at) WHERE status = 'active';

-- One row per committed change of a session: the audit trail and the source of rollbacks.
CREATE TABLE session_state_versions (
    session_id uuid NOT NULL REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL,
    agent_sequence jsonb NOT NULL,
    coordination_metadata jsonb NOT NULL,
    current_agent text,
    progress_percentage integer NOT NULL,
    status text NOT NULL,
    priority text NOT NULL,
    changed_by text NOT NULL,
    change_reason text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- (revision 0018) An auto-merged write: the version it was based on; a branch merge:
    -- that too, and the branch and branch version it took in.
    merge_base bigint CHECK (merge_base >= 1),
    merged_branch text,
    merged_branch_version bigint CHECK (merged_branch_version >= 1),
    PRIMARY KEY (session_id, version)
);


-- ---------------------------------------------------------------------------------------
-- Memories (revision 0002)

-- Who may read a memory of each access level: agents holding required_role (NULL: any
-- authenticated agent). The admin key reads every level, and the agent that wrote a memory
-- always reads it (owner access). Any agent may write at any level. Kept as data so a
-- deployment can add levels without code.
CREATE TABLE memory_access_levels (
    level text PRIMARY KEY CHECK (level ~ '^[a-z][a-z0-9_]{0,49}$'),
    required_role text CHECK (required_role ~ '^[a-z][a-z0-9_]{0,49}$'),
    description text NOT NULL DEFAULT ''
);

INSERT INTO memory_access_levels (level, required_role, description) VALUES
    ('all_agents', NULL, 'any authenticated agent'),
    ('authorized_agents', 'authorized', 'agents holding the authorized role'),
    ('analytics_agents', 'analytics', 'agents holding the analytics role'),
    ('coordination_manager', 'coordination_manager', 'the coordination manager only');

CREATE TABLE memory_categories (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,49}$'),
    -- NULL: kept until deleted.
    retention interval CHECK (retention > interval '0'),
    default_access_level text NOT NULL REFERENCES memory_access_levels (level),
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO memory_categories (name, retention, default_access_level, description) VALUES
    ('session_data', interval '24 hours', 'all_agents', 'current conversation context'),
    ('user_profile', NULL, 'authorized_agents', 'financial profile and preferences'),
    ('interaction_patterns', interval '1 year', 'analytics_agents', 'usage patterns and learning'),
    ('agent_outputs', interval '30 days', 'coordination_manager', 'agent results and recommendations');

-- Which category a memory of each type lands in when the writer does not say.
CREATE TABLE memory_types (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,49}$'),
    default_category text NOT NULL REFERENCES memory_categories (name),
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO memory_types (name, default_category, description) VALUES
    ('intent_session', 'interaction_patterns', 'interaction patterns, session history'),
    ('orchestrator', 'session_data', 'communication preferences, compliance logs'),
    ('data_collection', 'user_profile', 'financial profile, completeness tracking'),
    ('consultation', 'user_profile', 'risk tolerance, advisory history'),
    ('planning', 'agent_outputs', 'user goals, plan versions, trend data'),
    ('changes', 'agent_outputs', 'transaction logs, change history'),
    ('education', 'interaction_patterns', 'progress tracking, knowledge mastery');

CREATE TABLE memories (
    memory_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- A memory outlives the session it was written in (user-level facts are written during
    -- sessions); the link is dropped when the session goes.
    session_id uuid REFERENCES session_coordination (session_id) ON DELETE SET NULL,
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    memory_type text NOT NULL REFERENCES memory_types (name),
    category text NOT NULL REFERENCES memory_categories (name),
    key text CHECK (char_length(key) BETWEEN 1 AND 200),
    content jsonb NOT NULL,
    content_size integer NOT NULL CHECK (content_size >= 0),
    access_level text NOT NULL REFERENCES memory_access_levels (level),
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- NULL: never expires (a permanent category).
    expires_at timestamptz,
    CONSTRAINT memories_user_category_key_unique UNIQUE (user_id, category, key)
);

-- Newest-first keyset lists by session, by user and by writing agent.
CREATE INDEX memories_session_created_idx
    ON memories (session_id, created_at DESC, memory_id DESC) WHERE session_id IS NOT NULL;
CREATE INDEX memories_user_created_idx ON memories (user_id, created_at DESC, memory_id DESC);
CREATE INDEX memories_agent_created_idx
    ON memories (agent_name, created_at DESC, memory_id DESC);
-- Retention sweeps.
CREATE INDEX memories_expiry_idx ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memories_category_created_idx ON memories (category, created_at);
-- JSONB containment queries (?contains=).
CREATE INDEX memories_content_idx ON memories USING gin (content jsonb_path_ops);

CREATE TABLE memory_archive (
    memory_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id uuid,
    agent_name text NOT NULL,
    memory_type text NOT NULL,
    category text NOT NULL,
    key text,
    content jsonb NOT NULL,
    content_size integer NOT NULL,
    access_level text NOT NULL,
    version bigint NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    expires_at timestamptz,
    archived_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memory_archive_user_idx ON memory_archive (user_id);
CREATE INDEX memory_archive_archived_idx ON memory_archive (archived_at);

-- Append-only audit of memory access, allowed and denied.
CREATE TABLE memory_access_log (
    log_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    agent_name text NOT NULL,
    -- Who the key belongs to when it differs from agent_name (a caller acting for an agent).
    acting_principal text,
    action text NOT NULL CHECK (action IN ('read', 'list', 'write', 'update', 'delete', 'context', 'erase')),
    memory_id uuid,
    query jsonb,
    allowed boolean NOT NULL,
    rows integer NOT NULL DEFAULT 0,
    at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memory_access_log_agent_at_idx ON memory_access_log (agent_name, at DESC, log_id DESC);
CREATE INDEX memory_access_log_at_idx ON memory_access_log (at DESC, log_id DESC);

-- ---------------------------------------------------------------------------------------
-- Coordination (revision 0003)

-- Rule-based fallbacks: one row per strategy, its wording and parameters as data.
CREATE TABLE fallback_strategies (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    description text NOT NULL DEFAULT '',
    template jsonb NOT NULL CHECK (jsonb_typeof(template) = 'object')
);

INSERT INTO fallback_strategies (name, description, template) VALUES
    ('keyword_based_intent_detection', 'classify with the keyword rules instead of the AI classifier',
     '{"message": "Intent detected by keyword rules."}'),
    ('direct_agent_routing', 'route by the keyword rules without the orchestrator',
     '{"message": "I am passing your request about {intent_label} straight to {agent_label}.", "unrouted": "Our coordinator is not available right now, and I could not tell which specialist your message is for. Tell me what you need: a budget or plan, a change to your plan, advice, or an explanation of a money topic."}'),
    ('manual_data_entry_prompt', 'ask the user to enter their data themselves',
     '{"message": "Our data assistant is not available right now. You can enter the details yourself: {field_list}.", "fields": ["monthly_income", "monthly_expenses", "savings", "debts", "financial_goals"]}'),
    ('generic_financial_advice_disclaimer', 'general guidance with a disclaimer',
     '{"message": "Our advisor is not available right now, so here is general guidance only: keep an emergency fund of three to six months of expenses, pay down high-interest debt first, and spread investments across asset types. This is general information, not personal financial advice; for decisions about your situation, please talk to a qualified advisor."}'),
    ('basic_budget_template', 'a 50/30/20 budget, filled from the user profile when known',
     '{"message": "Our planning assistant is busy, so here is a starting budget based on the 50/30/20 rule{income_note}: needs {needs}, wants {wants}, savings and debt repayment {savings}.", "split": {"needs": 50, "wants": 30, "savings": 20}, "income_keys": ["monthly_income", "net_monthly_income", "income"]}'),
    ('change_confirmation_without_analysis', 'record the change, analyse it later',
     '{"message": "We have recorded your change request (\"{request}\"). It will be checked and analysed as soon as our change assistant is back; nothing else in your plan has been changed yet."}'),
    ('static_educational_content', 'serve stored educational content matching the question',
     '{"message": "{title}: {body}", "default_topic": "budgeting_basics"}');

CREATE TABLE educational_content (
    topic text PRIMARY KEY CHECK (topic ~ '^[a-z][a-z0-9_]{0,63}$'),
    title text NOT NULL,
    keywords text[] NOT NULL DEFAULT '{}',
    body text NOT NULL
);

INSERT INTO educational_content (topic, title, keywords, body) VALUES
    ('budgeting_basics', 'Budgeting basics', '{budget,budgeting,spending,expenses}',
     'A budget lists what comes in and what goes out each month. Start by tracking every expense for a month, group them into needs and wants, and set a limit for each group.'),
    ('emergency_fund', 'Emergency funds', '{emergency fund,rainy day,safety net}',
     'An emergency fund covers surprises such as a lost job or a broken car. Aim for three to six months of essential expenses, kept in an account you can reach quickly.'),
    ('compound_interest', 'Compound interest', '{interest,compound,compounding}',
     'Compound interest is interest earned on interest. The earlier you save, the longer your money has to grow, so small regular amounts started early can beat larger ones started late.'),
    ('credit_scores', 'Credit scores', '{credit score,credit rating,credit report}',
     'A credit score summarises how reliably you have repaid debt. Paying on time, keeping card balances low and avoiding many new applications all help it.'),
    ('debt_repayment', 'Paying off debt', '{debt,loan,repay,repayment}',
     'List your debts with their interest rates. Pay the minimum on all of them and put every extra amount on the one with the highest rate (or the smallest balance, if quick wins keep you going).'),
    ('investing_basics', 'Investing basics', '{invest,investing,investment,stocks,etf}',
     'Investing puts money to work for the long term. Spread it across many holdings, keep costs low, and only invest money you will not need for several years.');

-- Intent prioritization rules (seed: "Intent Prioritization Algorithm"), editable by the admin.
CREATE TABLE intent_types (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    base_weight integer NOT NULL CHECK (base_weight BETWEEN 0 AND 100),
    description text NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO intent_types (name, base_weight, description) VALUES
    ('emergency_financial', 100, 'a financial emergency: lost income, fraud, cannot pay'),
    ('urgent_changes', 80, 'change something in the plan or profile now'),
    ('request_consultation', 60, 'wants advice from an advisor'),
    ('request_plan', 50, 'wants a plan or budget made'),
    ('provide_info', 40, 'gives information about themselves'),
    ('ask_question', 30, 'asks to learn or understand something'),
    ('general_inquiry', 20, 'anything else');

CREATE TABLE intent_keywords (
    intent text NOT NULL REFERENCES intent_types (name) ON DELETE CASCADE ON UPDATE CASCADE,
    phrase text NOT NULL CHECK (phrase = lower(phrase) AND char_length(phrase) BETWEEN 1 AND 100),
    PRIMARY KEY (intent, phrase)
);

INSERT INTO intent_keywords (intent, phrase)
SELECT intent, unnest(phrases) FROM (VALUES
    ('emergency_financial', ARRAY['emergency', 'lost my job', 'laid off', 'fired', 'cannot pay', 'can''t pay',
        'fraud', 'scam', 'stolen', 'eviction', 'foreclosure', 'overdrawn', 'bankrupt', 'debt collector']),
    ('urgent_changes', ARRAY['change', 'update', 'cancel', 'modify', 'switch', 'stop my', 'remove',
        'increase my', 'reduce my', 'adjust']),
    ('request_consultation', ARRAY['advice', 'advise', 'advisor', 'adviser', 'consultation', 'consult',
        'should i', 'recommend', 'talk to someone', 'what would you suggest']),
    ('request_plan', ARRAY['plan', 'budget', 'savings plan', 'retirement plan', 'make a plan',
        'create a plan', 'set up a budget', 'roadmap', 'save for']),
    ('provide_info', ARRAY['my income', 'i earn', 'i make', 'my salary', 'my expenses', 'i spend',
        'i have savings', 'i owe', 'my rent', 'my age', 'i am', 'i''m', 'my goal']),
    ('ask_question', ARRAY['what is', 'what are', 'how does', 'how do', 'explain', 'why', 'what does',
        'teach me', 'learn', 'difference between', 'meaning of']),
    ('general_inquiry', ARRAY['hello', 'hi', 'help', 'thanks', 'thank you'])
) AS seed (intent, phrases);

CREATE TABLE intent_modifiers (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    -- Negative points lower a score (agent_unavailable); the total is kept within 0..cap.
    points integer NOT NULL CHECK (points BETWEEN -100 AND 100),
    description text NOT NULL DEFAULT ''
);

INSERT INTO intent_modifiers (name, points, description) VALUES
    ('session_in_progress', 20, 'the session already has an active process'),
    ('incomplete_critical_process', 30, 'an active process is unfinished and marked critical'),
    ('user_expressed_urgency', 25, 'the user said it is urgent'),
    ('time_sensitive_deadline', 15, 'the request has a deadline'),
    ('agent_unavailable', -25, 'the agent serving the intent is refusing calls (breaker open)');

CREATE TABLE intent_modifier_cues (
    modifier text NOT NULL REFERENCES intent_modifiers (name) ON DELETE CASCADE ON UPDATE CASCADE,
    phrase text NOT NULL CHECK (phrase = lower(phrase) AND char_length(phrase) BETWEEN 1 AND 100),
    PRIMARY KEY (modifier, phrase)
);

INSERT INTO intent_modifier_cues (modifier, phrase)
SELECT modifier, unnest(phrases) FROM (VALUES
    ('user_expressed_urgency', ARRAY['urgent', 'urgently', 'asap', 'as soon as possible', 'right away',
        'right now', 'immediately', 'today', 'emergency', 'quickly']),
    ('time_sensitive_deadline', ARRAY['deadline', 'due', 'by tomorrow', 'by monday', 'by tuesday',
        'by wednesday', 'by thursday', 'by friday', 'by the end of', 'before the end of', 'this week',
        'next week', 'end of the month'])
) AS seed (modifier, phrases);

-- The agent registry: keys, roles, routing and resilience settings (seed: agentFallbackStrategies).
-- Seeded agents have no key until the admin issues one.
CREATE TABLE agents (
    agent_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,99}$'),
    -- SHA-256 of the agent's key; the key itself is shown once and never stored.
    -- NULL: no key issued yet (a seeded agent).
    api_key_hash bytea UNIQUE CHECK (octet_length(api_key_hash) = 32),
    roles text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz,
    description text NOT NULL DEFAULT '',
    url text CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    timeout_ms integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 50 AND 300000),
    -- Retries after the first attempt, all within timeout_ms.
    retry_attempts integer NOT NULL DEFAULT 2 CHECK (retry_attempts BETWEEN 0 AND 10),
    fallback_strategy text REFERENCES fallback_strategies (name),
    intents text[] NOT NULL DEFAULT '{}',
    skills jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(skills) = 'array'),
    card jsonb CHECK (card IS NULL OR jsonb_typeof(card) = 'object'),
    enabled boolean NOT NULL DEFAULT true,
    fail_max integer NOT NULL DEFAULT 5 CHECK (fail_max BETWEEN 1 AND 1000),
    reset_timeout_ms integer NOT NULL DEFAULT 30000
        CHECK (reset_timeout_ms BETWEEN 10 AND 86400000),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- Revision 0023: A2A. The JSON-RPC interface the agent's card declares (and its
    -- protocol version): an agent with one is called with A2A SendMessage, not the seed's
    -- JSON request (app/outbound/a2a.py).
    a2a_url text CHECK (a2a_url ~ '^https?://[^\s]+$' AND char_length(a2a_url) <= 2000),
    a2a_protocol_version text CHECK (char_length(a2a_protocol_version) <= 20),
    -- Where the card came from and how its last fetch went: published (POST .../card),
    -- discovered (fetched from the agent's /.well-known/agent-card.json), unreachable or
    -- invalid (the last fetch failed; the card fetched before, if any, stays in use).
    card_status text CHECK (card_status IN ('published', 'discovered', 'unreachable', 'invalid')),
    card_error text CHECK (char_length(card_error) <= 2000),
    -- The last fetch that succeeded, and the last one tried.
    card_fetched_at timestamptz,
    card_checked_at timestamptz,
    -- The admin key acts (and owns memories) as "admin": no agent may take the name.
    CONSTRAINT agents_name_not_admin CHECK (lower(name) <> 'admin')
);

CREATE INDEX agents_intents_idx ON agents USING gin (intents);

-- Any change to agents (a write through any replica, the card refresh, an operator's SQL)
-- tells every replica, once per statement: each keeps the agent list the coordinator
-- routes by (app/agents/directory.py) and drops it when told. A Switchboard pool asks for
-- DEBUG messages (app/db/pool.py) and hears the announcement: its process drops the list
-- after the commit and NOTIFYs the others from a statement of its own, so the writing
-- transaction queues no NOTIFY. psql and other tools hear nothing, so their statement
-- NOTIFYs (agents change rarely: the lock a NOTIFY takes at commit costs nothing here).
CREATE FUNCTION agents_changed() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('client_min_messages') LIKE 'debug%' THEN
        PERFORM announce_after_commit('switchboard_agents', '');
    ELSE
        PERFORM pg_notify('switchboard_agents', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER agents_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON agents
    FOR EACH STATEMENT EXECUTE FUNCTION agents_changed();

INSERT INTO agents (name, description, roles, timeout_ms, retry_attempts, fallback_strategy, intents, skills)
VALUES
    ('Intent_Session_Agent', 'classifies what the user wants and keeps session history', '{analytics}',
     10000, 3, 'keyword_based_intent_detection', '{}',
     '[{"id": "intent_classification", "name": "Intent classification", "description": "Detect and rank the intents of a message", "tags": ["intent", "classification"], "examples": ["I lost my job and need a new budget"]}]'),
    ('Orchestrator_Agent', 'routes requests and handles general conversation', '{coordination_manager}',
     15000, 2, 'direct_agent_routing', '{general_inquiry}',
     '[{"id": "routing", "name": "Routing", "description": "Decide which specialist handles a request", "tags": ["routing", "general"], "examples": ["Hello, can you help me?"]}]'),
    ('Collect_Create_Data_Agent', 'collects the user''s financial profile', '{authorized}',
     30000, 3, 'manual_data_entry_prompt', '{provide_info}',
     '[{"id": "profile_collection", "name": "Financial profile collection", "description": "Record income, expenses, savings and debts", "tags": ["profile", "income", "expenses", "data"], "examples": ["I earn 4000 a month"]}]'),
    ('Consult_Customer_Agent', 'gives personal financial advice', '{authorized}',
     45000, 2, 'generic_financial_advice_disclaimer', '{request_consultation,emergency_financial}',
     '[{"id": "financial_advice", "name": "Financial advice", "description": "Advise on risk, debt and investment choices", "tags": ["advice", "consultation", "risk"], "examples": ["Should I pay off my loan or invest?"]}]'),
    ('Make_Plan_Agent', 'builds budgets and savings plans', '{authorized}',
     60000, 2, 'basic_budget_template', '{request_plan}',
     '[{"id": "budget_planning", "name": "Budget planning", "description": "Create budgets and savings plans", "tags": ["plan", "budget", "savings", "goals"], "examples": ["Make me a budget for next month"]}]'),
    ('Add_Changes_Agent', 'applies changes to plans and profiles', '{authorized}',
     20000, 3, 'change_confirmation_without_analysis', '{urgent_changes}',
     '[{"id": "plan_changes", "name": "Plan changes", "description": "Change an existing plan or profile entry", "tags": ["change", "update", "cancel"], "examples": ["Increase my savings rate to 15%"]}]'),
    ('Educate_Customer_Agent', 'explains financial concepts', '{}',
     25000, 2, 'static_educational_content', '{ask_question}',
     '[{"id": "financial_education", "name": "Financial education", "description": "Explain financial concepts in plain words", "tags": ["education", "explain", "learn"], "examples": ["What is compound interest?"]}]');

-- Circuit breaker state per agent, shared by every replica (changes are also NOTIFYed).
CREATE TABLE agent_breakers (
    agent_name text PRIMARY KEY REFERENCES agents (name) ON DELETE CASCADE ON UPDATE CASCADE,
    state text NOT NULL CHECK (state IN ('closed', 'open', 'half_open', 'forced_open')),
    failure_count integer NOT NULL DEFAULT 0 CHECK (failure_count >= 0),
    opened_at timestamptz,
    version bigint NOT NULL DEFAULT 1,
    updated_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every coordination decision, so a run can be explained and replayed.
CREATE TABLE coordination_decisions (
    decision_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    session_id uuid NOT NULL REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    session_version bigint,
    message text NOT NULL,
    context_flags text[] NOT NULL DEFAULT '{}',
    classifier text NOT NULL,
    intents jsonb NOT NULL,
    primary_intent text,
    chosen_agent text,
    routed_by text,
    breaker_state text,
    -- accepted (revision 0021): answered 202 with the agent's task (Prefer: respond-async).
    -- escalated, resolved (revision 0022): a session marked escalated (the next-step
    -- decision or a dead letter asked for a person: response.output_data holds the
    -- context) and a person's resolution of it (message: their note).
    outcome text NOT NULL
        CHECK (outcome IN ('agent', 'fallback', 'clarification', 'accepted', 'escalated',
                           'resolved')),
    fallback text,
    degraded boolean NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    response jsonb NOT NULL,
    execution_time_ms integer NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The trace of the request or task that made the decision (revision 0016): the id its
    -- answer named in X-Trace-Id and its log lines carry.
    trace_id text,
    -- The agent task behind the answer (revision 0021): the one the request waited for,
    -- stopped waiting for, or whose late answer this records. No foreign key: the decision
    -- outlives the task's row.
    task_id uuid,
    -- The next-step decision made after this one (revision 0022): outcome, rule, and its
    -- inputs (the event, the counters read from the log, the limits), so that it can be
    -- replayed and explained (app/coordination/next_step.py).
    next_step jsonb,
    -- The branch the turn was written to (revision 0025), NULL for the session itself;
    -- session_version is then the branch's version. No foreign key: the decision outlives
    -- the branch.
    branch text
);

CREATE INDEX coordination_decisions_session_idx
    ON coordination_decisions (session_id, created_at DESC, decision_id DESC);
-- The console's charts count decisions by time alone (revision 0029).
CREATE INDEX coordination_decisions_created_idx ON coordination_decisions (created_at);

-- ---------------------------------------------------------------------------------------
-- Scheduler (revision 0004)

-- Sessions that left the live tables, with their whole history, for the recovery window.
CREATE TABLE session_archive (
    session_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    reason text NOT NULL CHECK (reason IN ('expired', 'completed')),
    -- The session_coordination row and its session_state_versions rows, as JSON.
    session jsonb NOT NULL,
    versions jsonb NOT NULL CHECK (jsonb_typeof(versions) = 'array'),
    archived_at timestamptz NOT NULL,
    restorable_until timestamptz NOT NULL
);

CREATE INDEX session_archive_user_idx ON session_archive (user_id);
CREATE INDEX session_archive_restorable_idx ON session_archive (restorable_until);

-- One row per scheduled (or manual) run of a job: the exactly-once claim and its record.
CREATE TABLE job_runs (
    run_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    job_name text NOT NULL,
    -- The interval-aligned slot of a scheduled run; NULL for a manual run (never deduplicated).
    slot_start timestamptz CHECK (slot_start IS NOT NULL OR trigger = 'manual'),
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    dry_run boolean NOT NULL DEFAULT false,
    status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    claimed_by text NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    started_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    finished_at timestamptz,
    rows_affected bigint NOT NULL DEFAULT 0,
    details jsonb NOT NULL DEFAULT '{}',
    error text,
    CONSTRAINT job_runs_slot_unique UNIQUE (job_name, slot_start)
);

CREATE INDEX job_runs_job_started_idx ON job_runs (job_name, started_at DESC, run_id DESC);
-- Housekeeping purges finished runs oldest first.
CREATE INDEX job_runs_started_idx ON job_runs (started_at) WHERE status <> 'running';

-- Who hears about events (an n8n webhook, say), and the secret their signatures use.
CREATE TABLE subscriptions (
    subscription_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    url text NOT NULL CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    event_types text[] NOT NULL CHECK (cardinality(event_types) > 0),
    secret text NOT NULL CHECK (char_length(secret) >= 16),
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz,
    -- (revision 0026) The delivery target of an A2A push config (a2a_push_configs, which
    -- adds the foreign key): it gets only task_id's events. NULL for a subscriber.
    push_config_id uuid UNIQUE,
    task_id uuid
);

-- The W3C traceparent of the request or job whose transaction this is (revision 0016):
-- app/db/pool.py sets it with set_config(..., true) for a transaction opened with
-- trace=True. NULL outside one, and for anything that is not a version-00 traceparent.
CREATE FUNCTION current_traceparent() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT t FROM (SELECT current_setting('switchboard.traceparent', true) AS t) AS setting
    WHERE t ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
$$;

-- Events written in the same transaction as the change they describe (transactional outbox).
CREATE TABLE outbox_events (
    event_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The trace that wrote the event (revision 0016): whole, so that work done from the
    -- event later can continue it (app/tracing.py, Tracing.continue_trace), and its id.
    -- The statements that write events name neither: the transaction's traceparent is
    -- the default.
    traceparent text DEFAULT current_traceparent(),
    trace_id text GENERATED ALWAYS AS (substr(traceparent, 4, 32)) STORED,
    -- (revision 0024) The event's place in the event streams (the SSE id), in commit order:
    -- NULL when written, given by outbox_sequence() once the event has committed.
    position bigint
)
-- Vacuumed after 1 % of its rows changed, not 20 % (revision 0036): every event is updated
-- once (numbered), and each numbering run reads outbox_events_unsequenced_idx from its head,
-- where the numbered events' entries stay until a vacuum. At the default, ten million
-- events carry two million such entries before one: 7 ms more per run, which every
-- stream's delivery waits for (measured: a million of them took the 1,000 streams' p50
-- from 12 to 60 ms).
WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);

CREATE SEQUENCE outbox_events_position_seq;
CREATE UNIQUE INDEX outbox_events_position_idx ON outbox_events (position)
    WHERE position IS NOT NULL;
-- outbox_sequence() finds the events still to number by this.
CREATE INDEX outbox_events_unsequenced_idx ON outbox_events (created_at, event_id)
    WHERE position IS NULL;
-- A session's event stream catches up by this (the events whose payload names it).
CREATE INDEX outbox_events_session_position_idx
    ON outbox_events ((payload ->> 'session_id'), position) WHERE position IS NOT NULL;

CREATE INDEX outbox_events_type_created_idx ON outbox_events (event_type, created_at DESC);
-- Housekeeping purges old events oldest first.
CREATE INDEX outbox_events_created_idx ON outbox_events (created_at);

-- One delivery per event and subscriber, with its retry state.
CREATE TABLE event_deliveries (
    event_id uuid NOT NULL REFERENCES outbox_events (event_id) ON DELETE CASCADE,
    subscription_id uuid NOT NULL REFERENCES subscriptions (subscription_id) ON DELETE CASCADE,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error text,
    delivered_at timestamptz,
    PRIMARY KEY (event_id, subscription_id)
);

CREATE INDEX event_deliveries_due_idx ON event_deliveries (next_attempt_at) WHERE status = 'pending';

-- ---------------------------------------------------------------------------------------
-- Webhooks (revision 0005)

-- Responses to webhook calls that carried an Idempotency-Key, replayed for repeats.
CREATE TABLE idempotency_keys (
    -- The key's owner: keys are scoped per caller, so two callers never collide.
    principal text NOT NULL,
    key text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 255),
    endpoint text NOT NULL,
    request_hash bytea NOT NULL,
    status text NOT NULL CHECK (status IN ('in_progress', 'completed')),
    response_status integer,
    response_body jsonb,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    -- The claim of the request running under the key (revision 0012). A retry takes an
    -- in_progress key over once its holder is gone: the lease ran out (renewed every second
    -- while the request runs), or the owner replica holds no presence lock (its process
    -- died) and has not renewed the lease for a moment (a live replica whose presence
    -- connection alone dropped still renews). The token fences the holder: it completes or
    -- forgets only its own claim.
    -- A claim written by a replica older than 0012 has no owner and keeps the 12 minutes
    -- that replica waited.
    lease_owner text,
    lease_token uuid,
    lease_expires_at timestamptz NOT NULL DEFAULT now() + interval '12 minutes',
    lease_renewed_at timestamptz,
    PRIMARY KEY (principal, key)
);

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- Replica presence (revision 0012): every API process holds a session-level advisory lock
-- (replica_lock_space(), hashtext(its replica name)) on a connection of its own for as long
-- as it lives. A process that dies, however it dies, closes that connection (the kernel
-- closes a killed process's sockets) and PostgreSQL drops the lock at once. A 32-bit hash
-- collision only makes a dead replica look alive: its claims then wait for their lease.
CREATE FUNCTION replica_lock_space() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396855376  -- 'SBRP'; migrations lock with a single bigint key, a separate space
$$;

-- Whether the replica of that name is alive (holds its presence lock in this database).
CREATE FUNCTION replica_is_present(replica text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory'
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = replica_lock_space()::oid
          AND objid = hashtext(replica)::oid
          AND objsubid = 2
          AND granted
    )
$$;

-- Whether a request may take over the idempotency key k, which it found already stored
-- (revision 0038): the key's stored answer expired; or the key is still in progress for
-- this same request (endpoint, request_hash) and its holder is gone: its lease ran out
-- (the holder stopped renewing it: frozen, cut off, or it lost track of the key), or its
-- replica holds no presence lock (the process died) and has not renewed the lease since
-- renewed_before (a moment ago). Renewals (every second) prove a live holder whose presence
-- connection alone was lost (a network blip, a terminated backend): its request keeps the
-- key. A claim with no owner (written before leases, or while its replica had lost its
-- presence connection) waits for its lease alone. `at` is the request's now.
-- The ON CONFLICT rule of every statement that claims a key (claim_idempotency_key,
-- insert_checked_memory_claiming_key), so exactly-once holds one rule. One expression,
-- not STRICT: the planner inlines it (each k.column becomes the row's column).
CREATE FUNCTION idempotency_key_claimable(
    k idempotency_keys, endpoint text, request_hash bytea, at timestamptz,
    renewed_before timestamptz) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT k.expires_at <= at
        OR (k.status = 'in_progress'
            AND k.endpoint = endpoint
            AND k.request_hash = request_hash
            AND (k.lease_expires_at <= at
                 OR (k.lease_owner IS NOT NULL
                     AND k.lease_renewed_at <= renewed_before
                     AND NOT replica_is_present(k.lease_owner))))
$$;

-- ---------------------------------------------------------------------------------------
-- Erasure (revision 0008)

-- Whether a JSON document names one of the ids anywhere (a key, a value, or inside a
-- string), spelled the ways PostgreSQL and Python read a uuid: any case, with or without
-- the hyphens, in braces or after urn:uuid:. The one test erasure uses for copies of a
-- user's ids in free-form JSON: stored webhook responses, event payloads, audit queries.
CREATE FUNCTION jsonb_mentions_any(doc jsonb, ids uuid[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT EXISTS (
        SELECT 1
        FROM regexp_matches(
                doc::text,
                '[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}',
                'gi') AS found (match)
        WHERE found.match[1]::uuid = ANY (ids))
$$;

-- The JSON a text holds, or NULL if it holds none (PostgreSQL 15 has no pg_input_is_valid).
-- Audit rows keep a list's contains filter as the text the caller sent.
CREATE FUNCTION jsonb_or_null(value text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    RETURN value::jsonb;
EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
    RETURN NULL;
END
$$;

-- One row per erasure (a user, or only their memories): proof that it happened, who asked
-- and what it removed, without the id. user_id_sha256 is SHA-256 of the id as text
-- (`printf %s <id> | sha256sum`): whoever holds an id can find its erasure, the row alone
-- gives no id back (a UUIDv7 has 74 random bits). Audit rows redacted by an erasure name
-- its erasure_id.
CREATE TABLE user_erasures (
    erasure_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id_sha256 bytea NOT NULL CHECK (octet_length(user_id_sha256) = 32),
    scope text NOT NULL CHECK (scope IN ('user', 'memories')),
    erased_by text NOT NULL,
    erased_at timestamptz NOT NULL,
    -- {"deleted": {table: rows}, "redacted": {table: rows}}
    counts jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object')
);

CREATE INDEX user_erasures_user_idx ON user_erasures (user_id_sha256);

-- ---------------------------------------------------------------------------------------
-- Memory access (revision 0009)

-- The access levels a caller may read by role: all of them for the admin, else those that
-- need no role or one the caller holds. Every memory statement computes it once
-- (ARRAY(SELECT memory_readable_levels(...))) and hands it to memory_visible.
CREATE FUNCTION memory_readable_levels(is_admin boolean, roles text[]) RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT level FROM memory_access_levels
    WHERE is_admin OR required_role IS NULL OR required_role = ANY(roles)
$$;

-- Who sees a memory: its owner (the agent that created it) always, anyone else when its
-- level is among those they may read. One expression, so the planner inlines it.
CREATE FUNCTION memory_visible(owner text, level text, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT owner = caller OR level = ANY(readable)
$$;

-- ---------------------------------------------------------------------------------------
-- Shared rules (revision 0013): pieces several statements used to spell out, each once.

-- A memory is live until it expires; an expired one is gone for every reader even before
-- the retention job removes it.
CREATE FUNCTION memory_live(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at IS NULL OR m.expires_at > at
$$;

-- What every statement that reads, changes or deletes a memory checks: the memory is live
-- and `caller`, who may read the levels in `readable`, sees it. Statements pass
-- ARRAY(SELECT memory_readable_levels(<is_admin>, <roles>)) as `readable`, which runs once
-- per statement (an InitPlan). That subquery cannot move in here: PostgreSQL does not
-- inline a function whose body holds a subquery, and a function that is not inlined runs
-- once per row.
CREATE FUNCTION memory_readable(m memories, at timestamptz, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT memory_live(m, at) AND memory_visible(m.agent_name, m.access_level, caller, readable)
$$;

-- The rows a memory list shows, every filter optional (NULL: not asked): live memories the
-- reader sees, strictly before the keyset cursor (before_at, before_id). Each list
-- statement in memories.sql adds the filter its index leads with, the order and the limit.
-- SETOF and STABLE, one SELECT, so the planner inlines it into that statement and reads
-- through the index (a function that is not inlined would read every row it could match).
CREATE FUNCTION memory_list_rows(
    of_session uuid, of_user uuid, of_agent text, containing jsonb, of_type text,
    of_category text, since timestamptz, before_at timestamptz, before_id uuid,
    at timestamptz, is_admin boolean, roles text[], caller text)
    RETURNS SETOF memories
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT m.* FROM memories m
    WHERE (of_session IS NULL OR m.session_id = of_session)
      AND (of_user IS NULL OR m.user_id = of_user)
      AND (of_agent IS NULL OR m.agent_name = of_agent)
      AND (containing IS NULL OR m.content @> containing)
      AND (of_type IS NULL OR m.memory_type = of_type)
      AND (of_category IS NULL OR m.category = of_category)
      AND (since IS NULL OR m.created_at >= since)
      AND (m.created_at, m.memory_id) < (before_at, before_id)
      AND memory_readable(m, at, caller, ARRAY(SELECT memory_readable_levels(is_admin, roles)))
$$;

-- What a memory write is checked against (revision 0037): memory type -> default category,
-- category -> default level, all levels, which of the users `of_users` exist and who owns
-- each of the sessions `of_sessions`. write_reference reads it for a batch of writes;
-- insert_checked_memory checks one write against it in the statement that inserts it.
-- SETOF and STABLE, one SELECT: the planner inlines it into either statement.
CREATE FUNCTION memory_write_reference(of_users uuid[], of_sessions uuid[])
    RETURNS TABLE (
        types jsonb, categories jsonb, levels text[], users uuid[], session_owners jsonb)
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT
        (SELECT coalesce(jsonb_object_agg(t.name, t.default_category), '{}')
         FROM memory_types t),
        (SELECT coalesce(jsonb_object_agg(c.name, c.default_access_level), '{}')
         FROM memory_categories c),
        (SELECT coalesce(array_agg(l.level ORDER BY l.level), '{}')
         FROM memory_access_levels l),
        (SELECT coalesce(array_agg(u.id), '{}') FROM users u WHERE u.id = ANY(of_users)),
        (SELECT coalesce(jsonb_object_agg(s.session_id, s.user_id), '{}')
         FROM session_coordination s WHERE s.session_id = ANY(of_sessions))
$$;

-- The category one memory is written in, if it passes every check a write makes against
-- memory_write_reference()'s data (types, levels, users, session_owners; revision 0038):
-- a known memory type; its category (empty: none), else the type's default, else
-- session_data, a known category; a known access level, or none; a known user; a session
-- of that user, if one is named. No row: a check refused. insert_checked_memory and
-- insert_checked_memory_claiming_key both write through it (the service's own checks,
-- app/memories/service.py _plan_one, explain a refusal). SETOF and STABLE, one SELECT:
-- the planner inlines it into either statement.
CREATE FUNCTION memory_write_category(
    types jsonb, levels text[], users uuid[], session_owners jsonb,
    of_user uuid, of_session uuid, memory_type text, category text, access_level text)
    RETURNS SETOF memory_categories
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT c.*
    FROM memory_categories c
    WHERE c.name = coalesce(nullif(category, ''), types ->> memory_type, 'session_data')
      AND types ? memory_type
      AND (access_level IS NULL OR access_level = ANY(levels))
      AND cardinality(users) = 1
      AND (of_session IS NULL OR session_owners ->> of_session::text = of_user::text)
$$;

-- An agent as every statement returns it: its settings, state and card status, never its
-- key hash or card; `enabled` as routing sees it (false when the admin switched the agent off or
-- disabled it with DELETE, which also revoked its key); has_key (whether it has one).
-- Statements call it on a row of agents: FROM agents a, agent_shown(a) s, or on the row a
-- write returns (FROM changed c, agent_shown(c) s). One SELECT returning a set: the planner
-- inlines it.
CREATE FUNCTION agent_shown(a agents)
    RETURNS TABLE (
        agent_id uuid, name text, roles text[], created_at timestamptz,
        disabled_at timestamptz, description text, url text, timeout_ms integer,
        retry_attempts integer, fallback_strategy text, intents text[], skills jsonb,
        enabled boolean, fail_max integer, reset_timeout_ms integer, has_key boolean,
        updated_at timestamptz, a2a_url text, a2a_protocol_version text, card_status text,
        card_error text, card_fetched_at timestamptz, card_checked_at timestamptz)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.agent_id, a.name, a.roles, a.created_at, a.disabled_at, a.description, a.url,
           a.timeout_ms, a.retry_attempts, a.fallback_strategy, a.intents, a.skills,
           a.enabled AND a.disabled_at IS NULL, a.fail_max, a.reset_timeout_ms,
           a.api_key_hash IS NOT NULL, a.updated_at, a.a2a_url, a.a2a_protocol_version,
           a.card_status, a.card_error, a.card_fetched_at, a.card_checked_at
$$;

-- The version row that records a session as it now is (`s`, a session_coordination row),
-- who changed it, why and when; a merged write names the base it was merged from, a
-- branch merge the branch and branch version it took in. Every statement that writes a
-- new version inserts it:
--     INSERT INTO session_state_versions
--     SELECT v.* FROM <the changed rows> s, session_version(s, <by>, <reason>, <at>) v
-- One SELECT returning a set: the planner inlines it.
CREATE FUNCTION session_version(
    s session_coordination, changed_by text, change_reason text, at timestamptz,
    merge_base bigint DEFAULT NULL, merged_branch text DEFAULT NULL,
    merged_branch_version bigint DEFAULT NULL)
    RETURNS SETOF session_state_versions
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.session_id, s.version, s.session_state, s.agent_sequence, s.coordination_metadata,
           s.current_agent, s.progress_percentage, s.status, s.priority, changed_by,
           change_reason, at, merge_base, merged_branch, merged_branch_version
$$;

-- ---------------------------------------------------------------------------------------
-- Sweeps (revision 0014): which rows each job's sweep takes, and what its batches share.

-- Every sweep is a batch statement and a dry-run count over the same rows, in the .sql of
-- the feature that owns them. Which rows those are is one predicate here that both call
-- (`FROM <table> x WHERE <predicate>(x, ...)`), so a dry run counts what a run takes. Each
-- is one LANGUAGE sql expression that the planner inlines: the statements use the indexes
-- the condition spelled out would use, partial ones included (their predicates follow
-- from the inlined expression).

-- A session is open until it is completed. Only an open session takes content changes,
-- heartbeats, expiry warnings and expiry; a completed one waits for archival. The one
-- place SQL spells the closed status (Python's is app/sessions/schemas.py).
CREATE FUNCTION session_open(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.status <> 'completed'
$$;

-- A session runs a process while session_state.active_process is set: the expiry
-- extension and heartbeats keep it alive, and it is never idled, warned or expired.
CREATE FUNCTION session_running(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.session_state ->> 'active_process' IS NOT NULL
$$;

-- Time may idle a session, warn of its expiry and expire it, unless the user preserved it,
-- it runs a process, or it waits for a person (escalated, revision 0022).
CREATE FUNCTION session_may_lapse(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT s.preserve AND NOT session_running(s) AND s.status <> 'escalated'
$$;

-- Inactivity: an active session quiet since before `inactive_before` becomes idle.
CREATE FUNCTION session_goes_idle(s session_coordination, inactive_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.status = 'active' AND s.last_activity_at < inactive_before AND session_may_lapse(s)
$$;

-- Expiry extension: an open session whose process moved since `moved_since`, expiring
-- before `expiring_before`.
CREATE FUNCTION session_extendable(
    s session_coordination, moved_since timestamptz, expiring_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT session_running(s) AND s.updated_at > moved_since
       AND s.expires_at < expiring_before AND session_open(s)
$$;

-- Expiry warning: a session not yet warned that expires after `at` and by `until`.
CREATE FUNCTION session_expiring(s session_coordination, at timestamptz, until timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.expires_at > at AND s.expires_at <= until AND s.expiry_warned_at IS NULL
       AND session_may_lapse(s) AND session_open(s)
$$;

-- Expiry: a session past its expiry at `at` leaves for the archive (a completed one is
-- archival's, after the completed retention, whatever its expiry).
CREATE FUNCTION session_expired(s session_coordination, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.expires_at < at AND session_may_lapse(s) AND session_open(s)
$$;

-- Archival: a session completed before `completed_before` (its creation, if it has no
-- completion time) and not preserved leaves for the archive.
CREATE FUNCTION session_archivable(s session_coordination, completed_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT session_open(s) AND coalesce(s.completed_at, s.created_at) < completed_before
       AND NOT s.preserve
$$;

-- An archived session can be restored until its restorable_until; after it, it is purged.
CREATE FUNCTION session_archive_lapsed(a session_archive, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.restorable_until < at
$$;

-- Moves the sessions at `locked` (their row addresses, the rows locked by the caller, so
-- the addresses hold) to the archive with their history, because `why` ('expired' or
-- 'completed'), archived at `at` and restorable until `until`, and tells subscribers in
-- the same statement (session.expired or session.archived); returns how many moved.
-- Expiry and archival pick and lock their sessions each their own way (their own index
-- and order), then both move them with this. Each row is read once: the DELETE hands the
-- rows it removed to the archive (to_jsonb of what was deleted), with no second lookup by
-- id; the history is read by the statement's snapshot, before the cascade removes it.
CREATE FUNCTION session_archive_move(locked tid[], why text, at timestamptz, until timestamptz)
    RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    WITH moved AS (
        DELETE FROM session_coordination s
        WHERE s.ctid = ANY (locked)
        RETURNING s.*
    ), archived AS (
        INSERT INTO session_archive (session_id, user_id, reason, session, versions,
                                     archived_at, restorable_until)
        SELECT m.session_id, m.user_id, why, to_jsonb(m),
               coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version)
                         FROM session_state_versions v WHERE v.session_id = m.session_id),
                        '[]'),
               at, until
        FROM moved m
        ON CONFLICT (session_id) DO UPDATE
        SET reason = excluded.reason, session = excluded.session, versions = excluded.versions,
            archived_at = excluded.archived_at, restorable_until = excluded.restorable_until
        RETURNING session_id, user_id, restorable_until
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT CASE why WHEN 'expired' THEN 'session.expired' ELSE 'session.archived' END,
               jsonb_build_object('session_id', session_id, 'user_id', user_id,
                                  'restorable_until', restorable_until),
               at
        FROM archived
    )
    SELECT count(*) FROM archived
$$;

-- An expired interaction pattern moves to the memory archive; any other expired memory is
-- deleted. The retention sweep and a write that retires an expired memory holding its key
-- both go by this.
CREATE FUNCTION memory_archived_when_expired(m memories) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.category = 'interaction_patterns'
$$;

-- Retention: a memory expired before `at` that is deleted, and one that is archived.
CREATE FUNCTION memory_expired_to_delete(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at < at AND NOT memory_archived_when_expired(m)
$$;

CREATE FUNCTION memory_expired_to_archive(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at < at AND memory_archived_when_expired(m)
$$;

-- A memory as its memory_archive row, archived at `at`. Statements that archive insert
--     INSERT INTO memory_archive SELECT a.* FROM <the memories> m, memory_archived(m, <at>) a
CREATE FUNCTION memory_archived(m memories, at timestamptz) RETURNS SETOF memory_archive
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.memory_id, m.user_id, m.session_id, m.agent_name, m.memory_type, m.category,
           m.key, m.content, m.content_size, m.access_level, m.version, m.created_at,
           m.updated_at, m.expires_at, at
$$;

-- The memory archive keeps a row until its retention has passed (`before`: archived
-- earlier than this goes).
CREATE FUNCTION memory_archive_lapsed(a memory_archive, before timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.archived_at < before
$$;

-- A subscription wants an event of type `of_type` while it is enabled and lists the type.
CREATE FUNCTION subscription_wants(sub subscriptions, of_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT sub.disabled_at IS NULL AND of_type = ANY (sub.event_types)
$$;

-- Whether any subscription wants events of type `of_type`. Called with a constant, it runs
-- once per statement (a one-time filter).
CREATE FUNCTION event_subscribed(of_type text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (SELECT 1 FROM subscriptions sub WHERE subscription_wants(sub, of_type))
$$;

-- memory.purged: one event per user whose memories a retention batch took, with the count
-- per category, for `action` ('deleted', 'archived' or 'archive_purged'), at `at`; returns
-- how many users were told. The batch passes what it took counted per user and category
-- (`of_users`, `of_categories`, `counts`: one element per pair). A batch can touch 20,000
-- users, so the events are written only while some subscription wants them (an event
-- nobody subscribes to is never delivered); callers ask event_subscribed('memory.purged')
-- before they even count, which spares a batch nobody listens to the grouping. Counted
-- pairs, not a row per memory: arrays of 20,000 elements made a batch 5 ms (12 %) slower.
CREATE FUNCTION memory_purged_notice(
    of_users uuid[], of_categories text[], counts bigint[], action text, at timestamptz)
    RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    WITH told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'memory.purged',
               jsonb_build_object('user_id', user_id, 'action', action, 'count', sum(n),
                                  'categories', jsonb_object_agg(category, n)),
               at
        FROM unnest(of_users, of_categories, counts) AS taken (user_id, category, n)
        WHERE event_subscribed('memory.purged')
        GROUP BY user_id
        RETURNING event_id
    )
    SELECT count(*) FROM told
$$;

-- The access audit trail keeps a row until its retention has passed.
CREATE FUNCTION memory_access_lapsed(l memory_access_log, before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT l.at < before
$$;

-- A webhook's stored answer is kept until its key expires.
CREATE FUNCTION idempotency_key_lapsed(k idempotency_keys, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT k.expires_at < at
$$;

-- A finished job run is kept until its retention has passed; a running claim always.
CREATE FUNCTION job_run_lapsed(r job_runs, before timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT r.status <> 'running' AND r.started_at < before
$$;

-- Events created before `before` whose deliveries are all over (delivered or dead); an
-- event still being retried is never among them. A set, not a predicate on a row: the
-- condition holds a subquery, and PostgreSQL inlines a set-returning SQL function with one
-- (so the created_at index is used) but not a boolean one.
CREATE FUNCTION outbox_events_settled(before timestamptz) RETURNS SETOF outbox_events
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT e.* FROM outbox_events e
    WHERE e.created_at < before
      AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                      WHERE d.event_id = e.event_id AND d.status = 'pending')
$$;

-- Tell the writing process that this statement wrote something others wait for, without
-- a NOTIFY: a transaction that queues a NOTIFY takes one database-wide lock at commit, held
-- through its WAL flush, so every such commit would wait for the one before it (issue 22).
-- The message goes, in the statement's own reply, to the client that wrote; the pool asks
-- for it (client_min_messages = debug1, app/db/pool.py) and after the commit wakes that
-- process's own listeners and sends one coalesced NOTIFY from a connection of its own
-- (app/db/announce.py). psql and other tools see nothing (DEBUG is below their default);
-- what they write is found by the listeners' timers.
CREATE FUNCTION announce_after_commit(channel text, payload text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    RAISE DEBUG USING MESSAGE = 'switchboard announce', DETAIL = channel, HINT = payload;
END
$$;

-- Fan-out: every event gets a delivery per enabled subscription that wants its type, when
-- it is written, so a statement that writes events writes only the events. One INSERT per
-- statement over the events it wrote (a transition table): a batch that writes 20,000
-- events fans them out in one join, not 20,000 trigger calls.
CREATE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type)
        AND (sub.task_id IS NULL OR sub.task_id::text = e.payload ->> 'task_id');
    PERFORM announce_after_commit('switchboard_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_events_fan_out
    AFTER INSERT ON outbox_events
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_fan_out();

-- Event streams (revision 0024): an event's position is given after it committed, one
-- numbering at a time (a transaction-level advisory lock), each numbering only committed
-- events: positions then grow in the order readers can see them, and a stream that
-- resumes after position N misses nothing and repeats nothing (an identity column would
-- number in insert order, and an event numbered 6 could commit after one numbered 7 was
-- read). The replicas that serve streams number when told of new events
-- (outbox_fan_out's announcement, app/db/announce.py) and then read what is new:
-- app/events/hub.py.
CREATE FUNCTION outbox_sequence_lock() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396852054::bigint  -- 'SBEV'
$$;

-- One batch of a numbering run: up to `batch` committed events without a position, oldest
-- first, after the key (after_created, after_event) where the run's previous batch ended
-- (NULLs: from the oldest). Returns how many it numbered and the key of the last one. A
-- run passes each batch's key to the next (revision 0036): numbered events leave dead
-- entries at the head of outbox_events_unsequenced_idx until a vacuum removes them, and a
-- run draining a sweep's million events from the head every batch read them all again
-- (57 s to number a million, quadratic). An event that commits during a run with a key
-- before the run's bound is numbered by the next run, which its own announcement starts.
CREATE FUNCTION outbox_sequence_from(
    batch integer, after_created timestamptz, after_event uuid,
    OUT numbered bigint, OUT last_created timestamptz, OUT last_event uuid)
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(outbox_sequence_lock());
    WITH due AS (
        SELECT e.event_id, e.created_at FROM outbox_events e
        WHERE e.position IS NULL
          AND (e.created_at, e.event_id) > (coalesce(after_created, '-infinity'),
                                            coalesce(after_event, '00000000-0000-0000-0000-000000000000'))
        ORDER BY e.created_at, e.event_id
        LIMIT batch
    ), numbers AS (
        SELECT due.event_id, nextval('outbox_events_position_seq') AS position FROM due
    ), updated AS (
        UPDATE outbox_events e SET position = numbers.position
        FROM numbers
        WHERE e.event_id = numbers.event_id AND e.position IS NULL
        RETURNING 1
    ), last AS (
        SELECT due.created_at, due.event_id FROM due
        ORDER BY due.created_at DESC, due.event_id DESC
        LIMIT 1
    )
    SELECT (SELECT count(*) FROM updated), last.created_at, last.event_id
    INTO numbered, last_created, last_event
    FROM (SELECT) one LEFT JOIN last ON true;
END
$$;

-- Number up to `batch` committed events from the oldest: the previous releases' call, kept
-- for a replica still running one during an upgrade.
CREATE FUNCTION outbox_sequence(batch integer) RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    SELECT numbered FROM outbox_sequence_from(batch, NULL, NULL)
$$;

-- session.version: every new version of a session is told (session.handoff for a
-- handoff's, whose reason SessionService.handoff writes as 'handoff to <agent>: ...'),
-- once per statement over the versions it wrote. Only a version the session is now at:
-- a restore copies the archived history back (restore_session_versions), which is not
-- news, except for its latest version (told again, with session.restored).
CREATE FUNCTION session_version_told() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT CASE WHEN v.change_reason LIKE 'handoff to %' THEN 'session.handoff'
                ELSE 'session.version' END,
           jsonb_build_object('session_id', v.session_id, 'user_id', s.user_id,
                              'version', v.version, 'status', v.status,
                              'current_agent', v.current_agent,
                              'progress_percentage', v.progress_percentage,
                              'changed_by', v.changed_by, 'change_reason', v.change_reason,
                              'merge_base', v.merge_base),
           v.created_at
    FROM written v
    JOIN session_coordination s ON s.session_id = v.session_id AND s.version = v.version
    ORDER BY v.session_id, v.version;
    RETURN NULL;
END
$$;

CREATE TRIGGER session_state_versions_told
    AFTER INSERT ON session_state_versions
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION session_version_told();

-- A version that marks the session escalated without session_escalate() (a client's PATCH
-- of the status: an agent or a workflow calling a person) is recorded and announced the
-- same way: a decision (outcome 'escalated', classifier 'client', who set it as its
-- message) and session.escalated, in the writing statement. A version written while
-- the session was already escalated, one session_escalate() wrote (its decision names
-- the version), and an old version a restore copies back add nothing.
CREATE FUNCTION session_version_escalated() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    decided uuid;
    why text := format('%s set the status to escalated (%s)', NEW.changed_by,
                       NEW.change_reason);
BEGIN
    -- Only news: the version the session is at now (a restore copies old versions back,
    -- whose escalations were told, and resolved, long ago).
    IF NOT EXISTS (SELECT 1 FROM session_coordination c
                   WHERE c.session_id = NEW.session_id AND c.version = NEW.version)
       OR EXISTS (SELECT 1 FROM session_state_versions p
               WHERE p.session_id = NEW.session_id AND p.version = NEW.version - 1
                 AND p.status = 'escalated')
       OR EXISTS (SELECT 1 FROM coordination_decisions d
                  WHERE d.session_id = NEW.session_id AND d.session_version = NEW.version
                    AND d.outcome = 'escalated') THEN
        RETURN NULL;
    END IF;
    INSERT INTO coordination_decisions (
        session_id, session_version, message, classifier, intents, outcome, degraded,
        response, execution_time_ms, created_by, created_at, trace_id)
    VALUES (NEW.session_id, NEW.version, why, 'client', '[]', 'escalated', false,
            jsonb_build_object('text', why, 'output_data', '{}'::jsonb,
                               'next_agent_suggestions', '[]'::jsonb),
            0, NEW.changed_by, NEW.created_at, substr(current_traceparent(), 4, 32))
    RETURNING decision_id INTO decided;
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('session.escalated',
            jsonb_build_object('session_id', NEW.session_id, 'session_version', NEW.version,
                               'decision_id', decided, 'reason', why,
                               'escalated_by', NEW.changed_by, 'task_id', NULL,
                               'context', '{}'::jsonb),
            NEW.created_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER session_state_versions_escalated
    AFTER INSERT ON session_state_versions
    FOR EACH ROW
    WHEN (NEW.status = 'escalated')
    EXECUTE FUNCTION session_version_escalated();


-- ---------------------------------------------------------------------------------------
-- Branches (revision 0018)

-- Branches of a session: a named line of versions forked from the session ("main") at a
-- version, with the content of its head (the same content columns as the session). It
-- merges back into the session with the same three-way merge as an auto-merged write.
CREATE TABLE session_branches (
    session_id uuid NOT NULL REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$' AND name <> 'main'),
    purpose text NOT NULL CHECK (purpose IN ('analysis', 'alternative_solution', 'verification',
                                             'collaboration', 'conflict_resolution')),
    owner_agent text NOT NULL CHECK (char_length(owner_agent) BETWEEN 1 AND 100),
    state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'merged')),
    -- The session version the branch sits on: where it was forked, or last rebased onto.
    base_version bigint NOT NULL CHECK (base_version >= 1),
    forked_at_version bigint NOT NULL CHECK (forked_at_version >= 1),
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL CHECK (jsonb_typeof(session_state) = 'object'),
    agent_sequence jsonb NOT NULL CHECK (jsonb_typeof(agent_sequence) = 'array'),
    coordination_metadata jsonb NOT NULL CHECK (jsonb_typeof(coordination_metadata) = 'object'),
    current_agent text CHECK (char_length(current_agent) BETWEEN 1 AND 100),
    progress_percentage integer NOT NULL CHECK (progress_percentage BETWEEN 0 AND 100),
    priority text NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    -- The session version the merge wrote, once merged (a merged branch takes no writes).
    merged_version bigint,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    last_activity_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, name)
);

-- The idle-branch sweep picks by activity.
CREATE INDEX session_branches_activity_idx ON session_branches (last_activity_at);

-- Every version of a branch, as session_state_versions is for the session.
CREATE TABLE session_branch_versions (
    session_id uuid NOT NULL,
    branch text NOT NULL,
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL,
    agent_sequence jsonb NOT NULL,
    coordination_metadata jsonb NOT NULL,
    current_agent text,
    progress_percentage integer NOT NULL,
    priority text NOT NULL,
    changed_by text NOT NULL,
    change_reason text NOT NULL,
    created_at timestamptz NOT NULL,
    -- An auto-merged write: the branch version it was based on.
    merge_base bigint CHECK (merge_base >= 1),
    -- A fork or a rebase: the session version this branch version sits on.
    parent_version bigint CHECK (parent_version >= 1),
    PRIMARY KEY (session_id, branch, version),
    FOREIGN KEY (session_id, branch) REFERENCES session_branches (session_id, name)
        ON DELETE CASCADE
);

-- The version row that records a branch as it now is, as session_version does for a session.
CREATE FUNCTION session_branch_version(
    b session_branches, changed_by text, change_reason text, at timestamptz,
    merge_base bigint, parent_version bigint)
    RETURNS SETOF session_branch_versions
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT b.session_id, b.name, b.version, b.session_state, b.agent_sequence,
           b.coordination_metadata, b.current_agent, b.progress_percentage, b.priority,
           changed_by, change_reason, at, merge_base, parent_version
$$;

-- An open branch quiet since before `idle_before` expires, unless its session is preserved
-- (a preserved session keeps its branches). A merged branch is kept until deleted or until
-- its session goes.
CREATE FUNCTION session_branch_idle(b session_branches, idle_before timestamptz)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT b.state = 'open' AND b.last_activity_at < idle_before
       AND NOT EXISTS (SELECT 1 FROM session_coordination s
                       WHERE s.session_id = b.session_id AND s.preserve)
$$;

-- ---------------------------------------------------------------------------------------
-- Durable agent tasks (revision 0019)

-- One unit of agent work (an agent call), kept until it reaches a terminal state and
-- beyond: the queue, the lease of the replica running it, its retries and its result.
-- Status follows the A2A task states. A retry is the same task at a new attempt (status
-- stays 'working', the lease is cleared and scheduled_at moves to after the backoff);
-- agent_task_transition() below refuses every backward or terminal transition.
CREATE TABLE agent_tasks (
    task_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    session_id uuid REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    -- The user the work is for (as text: a task may be for a user Switchboard does not
    -- store); erasure deletes a user's tasks by it.
    user_id text CHECK (char_length(user_id) BETWEEN 1 AND 256),
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    kind text NOT NULL
        CHECK (kind IN ('message', 'pending_action', 'handoff', 'classify', 'agent_call')),
    -- The seed's request_format (AgentRequest) or what the kind's handler reads.
    input jsonb NOT NULL CHECK (jsonb_typeof(input) = 'object'),
    -- 10 is the most urgent and is claimed first.
    priority smallint NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 10),
    -- Not claimed before this: the submission time, or the end of a retry's backoff.
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'submitted'
        CHECK (status IN ('submitted', 'working', 'input-required', 'auth-required',
                          'completed', 'failed', 'canceled', 'rejected')),
    -- Claims so far (0 until the first); a claim adds one, a delay (open breaker) gives
    -- it back.
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts integer NOT NULL DEFAULT 6 CHECK (max_attempts BETWEEN 1 AND 100),
    -- The replica running the current attempt, until when (renewed while it runs).
    lease_owner text,
    lease_expires_at timestamptz,
    idempotency_key text CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    -- The principal that submitted the task; idempotency keys are scoped by it.
    created_by text NOT NULL,
    trace_id text,
    traceparent text,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    last_error text,
    -- The seed's response_format, once completed; while input-required, the agent's
    -- question and the A2A task and context to continue (app/coordination/tasks.py).
    result jsonb,
    -- The coordination decision that created the task.
    decision_id uuid,
    -- The waiter gave up and answered with the fallback; the answer is applied in the
    -- background when the task finishes.
    detached boolean NOT NULL DEFAULT false,
    -- A dead letter's requeue is a new task linked to the failed one.
    requeue_of uuid REFERENCES agent_tasks (task_id) ON DELETE SET NULL,
    -- Who made the latest transition and why; copied into agent_task_transitions.
    status_actor text,
    status_reason text,
    CONSTRAINT agent_tasks_lease_whole CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- The claim: queued tasks (never claimed, or waiting for their retry) in priority order.
CREATE INDEX agent_tasks_queue_idx ON agent_tasks (priority DESC, scheduled_at)
    WHERE status IN ('submitted', 'working') AND lease_owner IS NULL;
-- Running attempts: per-agent concurrency and the reaper's expired leases.
CREATE INDEX agent_tasks_leased_idx ON agent_tasks (agent_name, lease_expires_at)
    WHERE lease_owner IS NOT NULL;
-- Every claim and completion moves a task's row to a new version (status and lease are
-- indexed), which adds an entry to each index whose predicate the row meets: the indexes
-- below hold only the rows that have the value they look up.
-- An Idempotency-Key is unique per submitter (ON CONFLICT names this index).
CREATE UNIQUE INDEX agent_tasks_idempotency_key ON agent_tasks (created_by, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX agent_tasks_session_idx ON agent_tasks (session_id, created_at DESC, task_id DESC)
    WHERE session_id IS NOT NULL;
-- A session's task waiting for the user's input, looked up by every message (revision
-- 0023): only such tasks are in it.
CREATE INDEX agent_tasks_awaiting_input_idx ON agent_tasks (session_id, created_at DESC)
    WHERE status IN ('input-required', 'auth-required');
-- Erasure finds a user's tasks without a session by this.
CREATE INDEX agent_tasks_user_idx ON agent_tasks (user_id) WHERE user_id IS NOT NULL;
-- ON DELETE SET NULL of requeue_of looks up the requeues of a deleted task.
CREATE INDEX agent_tasks_requeue_of_idx ON agent_tasks (requeue_of) WHERE requeue_of IS NOT NULL;

-- Every transition of a task: who, when, why; written by agent_task_transition().
CREATE TABLE agent_task_transitions (
    task_id uuid NOT NULL REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    -- NULL for the task's creation.
    from_status text,
    to_status text NOT NULL,
    attempt integer NOT NULL,
    actor text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- When the task is due next (a retry: the end of its backoff).
    due_at timestamptz NOT NULL
);

CREATE INDEX agent_task_transitions_task_idx ON agent_task_transitions (task_id, at);

-- Tasks that failed for good, for a person to requeue or discard. Discarding keeps the
-- row (discarded_at/by/reason): the audit trail of what was given up and by whom.
CREATE TABLE dead_letters (
    dead_letter_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    task_id uuid NOT NULL UNIQUE REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    failure_reason text NOT NULL
        CHECK (failure_reason IN ('attempts_exhausted', 'not_retryable', 'lease_expired')),
    last_error text,
    failed_at timestamptz NOT NULL,
    manual_intervention_required boolean NOT NULL DEFAULT true,
    -- 1, plus one for each dead letter the task's requeue chain already had.
    escalation_level integer NOT NULL DEFAULT 1 CHECK (escalation_level >= 1),
    requeued_task_id uuid REFERENCES agent_tasks (task_id) ON DELETE SET NULL,
    requeued_at timestamptz,
    requeued_by text,
    discarded_at timestamptz,
    discarded_by text,
    discard_reason text CHECK (char_length(discard_reason) <= 1000),
    CONSTRAINT dead_letters_settled_once CHECK (requeued_at IS NULL OR discarded_at IS NULL)
);

CREATE INDEX dead_letters_failed_idx ON dead_letters (failed_at DESC, dead_letter_id DESC);
-- Deleting a task (its session's or user's deletion) looks for letters requeued as it.
CREATE INDEX dead_letters_requeued_idx ON dead_letters (requeued_task_id)
    WHERE requeued_task_id IS NOT NULL;

-- The transition rule, in the database so that no writer (a worker, a request, a person
-- at psql) can move a task backwards or out of a terminal state, and the history of every
-- transition, written with it. A retry (working -> working at a new attempt, or a lease
-- given up) is recorded; a lease renewal or a detach is not a transition (the trigger's
-- WHEN leaves them out). AFTER, not BEFORE: the history row references the task row. A
-- finished task, or one that waits for the user's input (revision 0023), is announced on
-- switchboard_task_finished (TaskService.wait listens). Every transition is also a
-- task.transition event (revision 0024), for the event streams and subscribers.
CREATE FUNCTION agent_task_transition() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    allowed boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        allowed := NEW.status IN ('submitted', 'working');
    ELSE
        allowed := CASE OLD.status
            WHEN 'submitted' THEN NEW.status IN ('working', 'canceled', 'rejected', 'failed')
            WHEN 'working' THEN NEW.status IN ('working', 'completed', 'failed', 'canceled',
                                               'input-required', 'auth-required')
            WHEN 'input-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            WHEN 'auth-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            ELSE false
        END;
    END IF;
    IF NOT allowed THEN
        RAISE EXCEPTION 'task % cannot go from % to %', NEW.task_id,
            CASE WHEN TG_OP = 'INSERT' THEN 'nothing' ELSE OLD.status END, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'agent_tasks_transition';
    END IF;
    INSERT INTO agent_task_transitions (task_id, from_status, to_status, attempt, actor, reason,
                                        due_at)
    VALUES (NEW.task_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
            NEW.attempt, coalesce(NEW.status_actor, NEW.created_by), NEW.status_reason,
            NEW.scheduled_at);
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.transition',
            jsonb_build_object('task_id', NEW.task_id, 'session_id', NEW.session_id,
                               'user_id', NEW.user_id, 'agent_name', NEW.agent_name,
                               'kind', NEW.kind,
                               'from_status', CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END,
                               'to_status', NEW.status, 'attempt', NEW.attempt,
                               'actor', coalesce(NEW.status_actor, NEW.created_by),
                               'reason', NEW.status_reason),
            clock_timestamp());
    IF NEW.status IN ('completed', 'failed', 'canceled', 'rejected', 'input-required',
                      'auth-required') THEN
        PERFORM announce_after_commit('switchboard_task_finished', NEW.task_id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_tasks_created
    AFTER INSERT ON agent_tasks
    FOR EACH ROW EXECUTE FUNCTION agent_task_transition();

CREATE TRIGGER agent_tasks_transition
    AFTER UPDATE ON agent_tasks
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt <> NEW.attempt
          OR (OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NULL))
    EXECUTE FUNCTION agent_task_transition();

-- A2A push notification configs (revision 0026): set on a task by a caller who may see
-- it, gone with it. Each has a delivery target in subscriptions (push_config_id, gone
-- with the config) that the fan-out gives only its task's task.transition events; the
-- outbox's delivery loop posts them as A2A StreamResponse bodies (app/a2a/push.py).
CREATE TABLE a2a_push_configs (
    push_config_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    task_id uuid NOT NULL REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    config_id text NOT NULL CHECK (char_length(config_id) BETWEEN 1 AND 200),
    url text NOT NULL CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    token text CHECK (char_length(token) <= 2000),
    authentication jsonb,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (task_id, config_id)
);

ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_push_config_id_fkey
    FOREIGN KEY (push_config_id) REFERENCES a2a_push_configs (push_config_id) ON DELETE CASCADE;

-- The key of the claimers' turn (also taken by a submission leased at once).
CREATE FUNCTION agent_tasks_claim_lock() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396855377::bigint  -- 'SBRQ'
$$;
-- The claim: up to `wanted` due tasks leased to `owner` until `lease_until`, in priority
-- (10 first) then scheduled_at order, skipping rows another claimer holds and agents at
-- their concurrency limit (`limited_agents` with `agent_limits`, `default_limit` for the
-- rest) and tasks held by their escalated session (agent_task_held). Claims take turns (a
-- transaction-level advisory lock): the per-agent count they read is then never read by
-- two at once. A plpgsql function, so that the claim after the
-- lock reads a snapshot taken after it, in one round trip. A few more rows than wanted are
-- locked, so that per-agent trimming still fills the batch.
CREATE FUNCTION agent_tasks_claim(
    now timestamptz, owner text, lease_until timestamptz, wanted integer,
    limited_agents text[], agent_limits integer[], default_limit integer)
    RETURNS SETOF agent_tasks
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(agent_tasks_claim_lock());
    RETURN QUERY
    WITH running AS (
        SELECT agent_name, count(*) AS n FROM agent_tasks
        WHERE lease_owner IS NOT NULL GROUP BY agent_name
    ), limits AS (
        SELECT agent_name, n FROM unnest($5::text[], $6::integer[]) AS l (agent_name, n)
    ), candidates AS (
        SELECT t.task_id, t.agent_name, t.priority, t.scheduled_at
        FROM agent_tasks t
        WHERE t.status IN ('submitted', 'working') AND t.lease_owner IS NULL
          AND t.scheduled_at <= $1
          AND NOT agent_task_held(t.session_id, t.requeue_of)
          AND coalesce((SELECT r.n FROM running r WHERE r.agent_name = t.agent_name), 0)
              < coalesce((SELECT l.n FROM limits l WHERE l.agent_name = t.agent_name), $7)
        ORDER BY t.priority DESC, t.scheduled_at
        LIMIT $4::integer * 4
        FOR UPDATE SKIP LOCKED
    ), chosen AS (
        SELECT c.task_id FROM (
            SELECT c.*, row_number() OVER (PARTITION BY c.agent_name
                                           ORDER BY c.priority DESC, c.scheduled_at) AS k
            FROM candidates c) c
        WHERE c.k + coalesce((SELECT r.n FROM running r WHERE r.agent_name = c.agent_name), 0)
              <= coalesce((SELECT l.n FROM limits l WHERE l.agent_name = c.agent_name), $7)
        ORDER BY c.priority DESC, c.scheduled_at
        LIMIT $4
    )
    UPDATE agent_tasks t
    SET status = 'working', attempt = t.attempt + 1, lease_owner = $2, lease_expires_at = $3,
        started_at = coalesce(t.started_at, $1), status_actor = $2, status_reason = 'claimed'
    FROM chosen
    WHERE t.task_id = chosen.task_id
    RETURNING t.*;
END
$$;

-- A queued task wakes the workers (they also poll): once per statement, whatever it wrote.
CREATE FUNCTION agent_task_queued() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM announce_after_commit('switchboard_tasks', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_tasks_queued
    AFTER INSERT ON agent_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION agent_task_queued();

-- A task that failed for good (`t`, already 'failed'): its dead letter, its session
-- escalated (session_escalate: a new version when the session is active or idle, the
-- decision with the failure's context, the session.escalated event) and a
-- task.dead_lettered event, at `at`. Returns the dead letter's id. Every way a task fails
-- for good (a last attempt, a refusal, a lease that ran out on the last attempt) ends here.
-- A dead letter always asks for a person (manual_intervention_required): the next-step
-- rule dead_lettered, fixed here rather than read from next_step_rules.
CREATE FUNCTION agent_task_dead_lettered(t agent_tasks, why text, at timestamptz)
    RETURNS uuid
    LANGUAGE plpgsql
AS $$
DECLARE
    letter uuid;
    level integer;
    errors jsonb;
BEGIN
    SELECT coalesce(max(d.escalation_level), 0) + 1 INTO level
    FROM dead_letters d WHERE d.task_id = t.requeue_of;
    INSERT INTO dead_letters (task_id, failure_reason, last_error, failed_at, escalation_level)
    VALUES (t.task_id, why, t.last_error, at, level)
    RETURNING dead_letter_id INTO letter;
    -- The last errors: the failed attempts' own, newest first (a retry's reason is
    -- 'retry after: <error>'), the final one first of all.
    SELECT coalesce(jsonb_agg(e.reason ORDER BY e.at DESC), '[]') INTO errors
    FROM (SELECT x.reason, x.at FROM agent_task_transitions x
          WHERE x.task_id = t.task_id AND x.reason LIKE 'retry after: %'
          ORDER BY x.at DESC LIMIT 4) e;
    IF t.last_error IS NOT NULL THEN
        errors := jsonb_build_array(t.last_error) || errors;
    END IF;
    PERFORM session_escalate(
        t.session_id, 'task:' || t.task_id::text,
        'task ' || t.task_id::text || ' (' || t.agent_name || ') failed for good: ' || why,
        jsonb_build_object(
            'event', 'dead_lettered',
            'what_failed', jsonb_build_object('task_id', t.task_id, 'agent', t.agent_name,
                                              'kind', t.kind, 'failure_reason', why,
                                              'dead_letter_id', letter),
            'how_often', jsonb_build_object('attempts', t.attempt,
                                            'escalation_level', level),
            'limits', jsonb_build_object('max_attempts', t.max_attempts),
            'last_errors', errors),
        jsonb_build_object(
            'outcome', 'request_manual_intervention', 'rule', 'dead_lettered',
            'reason', 'a task failed for good: its dead letter needs a person',
            'inputs', jsonb_build_object(
                'event', 'dead_lettered',
                'counters', jsonb_build_object('attempts', t.attempt,
                                               'escalation_level', level),
                'limits', jsonb_build_object('max_attempts', t.max_attempts))),
        at, t.trace_id, t.task_id)
    WHERE t.session_id IS NOT NULL;
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.dead_lettered',
            jsonb_build_object('dead_letter_id', letter, 'task_id', t.task_id,
                               'session_id', t.session_id, 'user_id', t.user_id,
                               'agent_name', t.agent_name, 'kind', t.kind,
                               'failure_reason', why, 'last_error', t.last_error,
                               'attempts', t.attempt, 'escalation_level', level),
            at);
    RETURN letter;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Memories of a branch (revision 0020): an overlay on the user's memories. A row here is
-- the branch's value of (category, key) for the session's user; reads on the branch see it
-- in place of main's memory of that key, main never sees it, and merging the branch
-- writes it into memories. The columns up to expires_at are the memory's, in memories'
-- order; base_* is main's memory of the key when the branch first wrote it (NULL: there
-- was none), which a merge compares with main's memory then to find the keys both changed.
-- The rows go with their branch (deleted, expired, merged) and with their user.
CREATE TABLE branch_memories (
    memory_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id uuid NOT NULL,
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    memory_type text NOT NULL REFERENCES memory_types (name),
    category text NOT NULL REFERENCES memory_categories (name),
    key text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 200),
    content jsonb NOT NULL,
    content_size integer NOT NULL CHECK (content_size >= 0),
    access_level text NOT NULL REFERENCES memory_access_levels (level),
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    branch text NOT NULL,
    base_memory_id uuid,
    base_version bigint CHECK (base_version >= 1),
    base_content jsonb,
    CONSTRAINT branch_memories_key_unique UNIQUE (session_id, branch, category, key),
    FOREIGN KEY (session_id, branch) REFERENCES session_branches (session_id, name)
        ON DELETE CASCADE
);

-- Retention walks expiry; erasure of a user's memories finds them by user.
CREATE INDEX branch_memories_expiry_idx ON branch_memories (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX branch_memories_user_idx ON branch_memories (user_id);

-- memory_readable for a branch's row: the same rule (live, and the caller's own or at a
-- level it reads), one SELECT the planner inlines.
CREATE FUNCTION branch_memory_readable(
    b branch_memories, at timestamptz, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (b.expires_at IS NULL OR b.expires_at > at)
       AND memory_visible(b.agent_name, b.access_level, caller, readable)
$$;

-- ---------------------------------------------------------------------------------------
-- Next step and escalation (revision 0022)

-- The next-step rules (app/coordination/next_step.py): after each agent result and each
-- failure the coordinator takes the first rule, by position, whose event (NULL: any) and
-- condition hold, and records its outcome with the inputs it read. Conditions and outcomes
-- are a fixed vocabulary (the checks below); which condition leads to which outcome, and
-- in what order, is data a deployment may change. The limits are settings.
CREATE TABLE next_step_rules (
    position integer PRIMARY KEY CHECK (position >= 0),
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    event text CHECK (event IN ('answered', 'fallback', 'clarification', 'accepted')),
    condition text NOT NULL
        CHECK (condition IN ('always', 'step_retries_exhausted', 'fallbacks_exceeded',
                             'handoffs_exceeded', 'stalled', 'complete', 'handoff_suggested',
                             'queue_waiting')),
    outcome text NOT NULL
        CHECK (outcome IN ('continue', 'hand_off', 'ask_user', 'finalize',
                           'request_manual_intervention')),
    description text NOT NULL DEFAULT ''
);

INSERT INTO next_step_rules (position, name, event, condition, outcome, description) VALUES
    (10, 'step_retries', NULL, 'step_retries_exhausted', 'request_manual_intervention',
     'the same step (intent and agent) failed again after its last allowed retry'),
    (20, 'consecutive_fallbacks', NULL, 'fallbacks_exceeded', 'request_manual_intervention',
     'more fallback answers in a row than allowed'),
    (30, 'handoffs_without_progress', NULL, 'handoffs_exceeded', 'request_manual_intervention',
     'more handoffs than allowed without the progress moving'),
    (40, 'stalled', NULL, 'stalled', 'request_manual_intervention',
     'no progress for longer than allowed'),
    (50, 'clarification', 'clarification', 'always', 'ask_user',
     'the intents were too close to call: the user picks'),
    (60, 'finished', 'answered', 'complete', 'finalize',
     'the agent reported 100% and nothing waits in the queue'),
    (70, 'handoff', NULL, 'handoff_suggested', 'hand_off',
     'the turn passed the request on, or the answer suggested a registered agent'),
    (80, 'next_intent', NULL, 'queue_waiting', 'continue',
     'a queued intent waits: process it next (POST .../pending/next)'),
    (90, 'wait_for_user', NULL, 'always', 'ask_user',
     'nothing else to do: the next message is the user''s');

-- Whether a task waits for its session: a session that waits for a person (escalated)
-- holds its tasks in the queue (queued, not failed) until it is resolved. A dead letter's
-- requeue is a person's own decision and is not held.
CREATE FUNCTION agent_task_held(sid uuid, requeue_of uuid) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT requeue_of IS NULL AND EXISTS (
        SELECT 1 FROM session_coordination s
        WHERE s.session_id = sid AND s.status = 'escalated')
$$;

-- A session completed while escalated (a person closed it instead of resolving it): the
-- tasks it held will never have a session to answer, so they are canceled in the same
-- statement (the transition trigger records each and tells task.transition). Tasks already
-- running when the session was escalated, and a dead letter's requeue, are left alone.
CREATE FUNCTION session_completed_cancels_held() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE agent_tasks
    SET status = 'canceled', finished_at = NEW.updated_at, status_actor = 'switchboard',
        status_reason = 'its session was completed while escalated'
    WHERE session_id = NEW.session_id AND status = 'submitted' AND lease_owner IS NULL
      AND requeue_of IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER session_coordination_completed_escalated
    AFTER UPDATE OF status ON session_coordination
    FOR EACH ROW
    WHEN (OLD.status = 'escalated' AND NEW.status = 'completed')
    EXECUTE FUNCTION session_completed_cancels_held();

-- Manual intervention: session `sid` marked escalated at `at` (a new version by `actor`,
-- when it is active or idle), the decision that records why (outcome 'escalated', message
-- `why`, the context in response.output_data, the next-step decision in next_step) and
-- the event session.escalated, in one statement. A failure that asks for a person while
-- the session already waits for one (a task that was running, a dead letter) is recorded
-- the same way, on the version the session is at (no new version: nothing changed but
-- the news), its event marked `already_escalated`: the person sees every failure, not
-- only the first. Returns the decision's id; NULL when the session is neither active,
-- idle nor escalated (completed, gone): nothing is written.
-- The one way the server escalates: the coordinator's next-step decision
-- (app/coordination/escalation.py) and a task's dead letter both come here.
CREATE FUNCTION session_escalate(
    sid uuid, actor text, why text, context jsonb, decided jsonb, at timestamptz,
    trace text, task uuid)
    RETURNS uuid
    LANGUAGE sql VOLATILE
AS $$
    WITH escalated AS (
        UPDATE session_coordination c
        SET status = 'escalated', version = c.version + 1, updated_at = at
        WHERE c.session_id = sid AND c.status IN ('active', 'idle')
        RETURNING c.*
    ), already AS (
        -- The statement's snapshot: the row as it was before the UPDATE above, which
        -- takes only an active or idle one, so at most one of the two holds a row.
        SELECT c.session_id, c.version FROM session_coordination c
        WHERE c.session_id = sid AND c.status = 'escalated'
    ), recorded AS (
        INSERT INTO session_state_versions
        SELECT v.* FROM escalated e, session_version(e, actor, 'escalated: ' || why, at) v
    ), decision AS (
        INSERT INTO coordination_decisions (
            session_id, session_version, message, classifier, intents, outcome, degraded,
            response, execution_time_ms, created_by, created_at, trace_id, task_id, next_step)
        SELECT e.session_id, e.version, why, 'next_step', '[]', 'escalated', false,
               jsonb_build_object('text', why, 'output_data', context,
                                  'next_agent_suggestions', '[]'::jsonb),
               0, actor, at, trace, task, decided
        FROM (SELECT session_id, version FROM escalated
              UNION ALL SELECT session_id, version FROM already) e
        RETURNING decision_id, session_version
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'session.escalated',
               jsonb_build_object('session_id', sid, 'session_version', d.session_version,
                                  'decision_id', d.decision_id, 'reason', why,
                                  'escalated_by', actor, 'task_id', task, 'context', context,
                                  'already_escalated', EXISTS (SELECT 1 FROM already)),
               at
        FROM decision d
    )
    SELECT decision_id FROM decision
$$;
