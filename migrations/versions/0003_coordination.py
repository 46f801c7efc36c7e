"""Coordination: intent rules, fallback content, agent routing settings, breakers, decisions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UPGRADE = r"""
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
     '{"message": "I am passing your request about {intent_label} straight to {agent_label}."}'),
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
    points integer NOT NULL CHECK (points BETWEEN 0 AND 100),
    description text NOT NULL DEFAULT ''
);

INSERT INTO intent_modifiers (name, points, description) VALUES
    ('session_in_progress', 20, 'the session already has an active process'),
    ('incomplete_critical_process', 30, 'an active process is unfinished and marked critical'),
    ('user_expressed_urgency', 25, 'the user said it is urgent'),
    ('time_sensitive_deadline', 15, 'the request has a deadline');

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

-- The agent registry grows the routing and resilience settings (seed: agentFallbackStrategies).
-- Seeded agents have no key until the admin issues one.
ALTER TABLE agents ALTER COLUMN api_key_hash DROP NOT NULL;
ALTER TABLE agents
    ADD COLUMN description text NOT NULL DEFAULT '',
    ADD COLUMN url text CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    ADD COLUMN timeout_ms integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 50 AND 300000),
    -- Retries after the first attempt, all within timeout_ms.
    ADD COLUMN retry_attempts integer NOT NULL DEFAULT 2 CHECK (retry_attempts BETWEEN 0 AND 10),
    ADD COLUMN fallback_strategy text REFERENCES fallback_strategies (name),
    ADD COLUMN intents text[] NOT NULL DEFAULT '{}',
    ADD COLUMN skills jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(skills) = 'array'),
    ADD COLUMN card jsonb CHECK (card IS NULL OR jsonb_typeof(card) = 'object'),
    ADD COLUMN enabled boolean NOT NULL DEFAULT true,
    ADD COLUMN fail_max integer NOT NULL DEFAULT 5 CHECK (fail_max BETWEEN 1 AND 1000),
    ADD COLUMN reset_timeout_ms integer NOT NULL DEFAULT 30000
        CHECK (reset_timeout_ms BETWEEN 10 AND 86400000),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

CREATE INDEX agents_intents_idx ON agents USING gin (intents);

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
    outcome text NOT NULL CHECK (outcome IN ('agent', 'fallback', 'clarification')),
    fallback text,
    degraded boolean NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    response jsonb NOT NULL,
    execution_time_ms integer NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX coordination_decisions_session_idx
    ON coordination_decisions (session_id, created_at DESC, decision_id DESC);
"""

DOWNGRADE = """
DROP TABLE coordination_decisions;
DROP TABLE agent_breakers;
DELETE FROM agents WHERE api_key_hash IS NULL;
DROP INDEX agents_intents_idx;
ALTER TABLE agents
    DROP COLUMN description,
    DROP COLUMN url,
    DROP COLUMN timeout_ms,
    DROP COLUMN retry_attempts,
    DROP COLUMN fallback_strategy,
    DROP COLUMN intents,
    DROP COLUMN skills,
    DROP COLUMN card,
    DROP COLUMN enabled,
    DROP COLUMN fail_max,
    DROP COLUMN reset_timeout_ms,
    DROP COLUMN updated_at;
ALTER TABLE agents ALTER COLUMN api_key_hash SET NOT NULL;
DROP TABLE intent_modifier_cues;
DROP TABLE intent_modifiers;
DROP TABLE intent_keywords;
DROP TABLE intent_types;
DROP TABLE educational_content;
DROP TABLE fallback_strategies;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
