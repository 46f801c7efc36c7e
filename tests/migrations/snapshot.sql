-- Catalog snapshot of the public schema, for comparing migrations with sql/schema.sql.

-- name: columns
SELECT c.relname AS table_name, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull, pg_get_expr(d.adbin, d.adrelid) AS default_expr
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relname <> 'alembic_version'
ORDER BY 1, 2

-- name: constraints
SELECT c.relname AS table_name, con.conname, pg_get_constraintdef(con.oid) AS definition
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relname <> 'alembic_version'
ORDER BY 1, 2

-- name: indexes
SELECT tablename, indexname, indexdef FROM pg_indexes
WHERE schemaname = 'public' AND tablename <> 'alembic_version'
ORDER BY 1, 2

-- name: functions
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, pg_get_functiondef(p.oid) AS definition
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public'
ORDER BY 1, 2

-- name: seed_rows
-- Reference data the migrations seed must match too.
SELECT 'memory_categories' AS t, name || ':' || coalesce(retention::text, '-') || ':' || default_access_level AS row FROM memory_categories
UNION ALL SELECT 'memory_types', name || ':' || default_category FROM memory_types
UNION ALL SELECT 'memory_access_levels', level || ':' || coalesce(required_role, '-') FROM memory_access_levels
UNION ALL SELECT 'intent_types', name || ':' || base_weight FROM intent_types
UNION ALL SELECT 'intent_keywords', intent || ':' || phrase FROM intent_keywords
UNION ALL SELECT 'intent_modifiers', name || ':' || points FROM intent_modifiers
UNION ALL SELECT 'intent_modifier_cues', modifier || ':' || phrase FROM intent_modifier_cues
UNION ALL SELECT 'fallback_strategies', name || ':' || md5(template::text) FROM fallback_strategies
UNION ALL SELECT 'educational_content', topic || ':' || md5(body) FROM educational_content
UNION ALL SELECT 'agents', name || ':' || timeout_ms || ':' || retry_attempts || ':' || coalesce(fallback_strategy, '-') FROM agents
ORDER BY 1, 2

-- name: public_tables
SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1

-- name: public_functions
SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' ORDER BY 1
