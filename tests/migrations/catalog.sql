-- Catalog snapshot of schema public, for comparing `alembic upgrade head` with sql/schema.sql.
-- Only objects in schema public; alembic's own bookkeeping table is left out everywhere.
-- Every query is fully ordered, so two snapshots compare row for row.
-- tables .. extensions make up the snapshot; public_* check what a downgrade leaves behind;
-- the rest are probes for tests/migrations/test_schema.py (uuid keys, UUIDv7, alembic).

-- name: tables
SELECT c.relname AS table_name, c.relkind::text AS kind, c.relpersistence::text AS persistence,
       c.relrowsecurity AS row_security, coalesce(c.reloptions, '{}') AS options
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'f')
  AND c.relname <> 'alembic_version'
ORDER BY c.relname

-- name: columns
-- position counts live columns only: a column dropped and re-added leaves a gap in attnum,
-- yet a table with the same columns in the same order is the same table.
SELECT c.relname AS table_name,
       row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position,
       a.attname AS column_name,
       format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr,
       a.attidentity::text AS identity,
       a.attgenerated::text AS generated,
       coalesce(co.collname, '') AS collation
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
    AND co.collname <> 'default'
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'f', 'v', 'm')
  AND c.relname <> 'alembic_version'
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY table_name, position

-- name: constraints
SELECT c.relname AS table_name, con.conname AS constraint_name,
       pg_get_constraintdef(con.oid) AS definition
FROM pg_constraint con
JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relname <> 'alembic_version'
ORDER BY table_name, constraint_name, definition

-- name: indexes
SELECT t.relname AS table_name, i.relname AS index_name,
       pg_get_indexdef(i.oid) AS definition
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'public' AND t.relname <> 'alembic_version'
ORDER BY table_name, index_name

-- name: functions
-- pg_get_functiondef refuses aggregates, so they are listed by signature only.
SELECT p.proname AS function_name,
       pg_get_function_identity_arguments(p.oid) AS arguments,
       p.prokind::text AS kind,
       CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) END AS definition
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public'
ORDER BY function_name, arguments

-- name: triggers
SELECT c.relname AS table_name, t.tgname AS trigger_name,
       pg_get_triggerdef(t.oid) AS definition, t.tgenabled::text AS enabled
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND NOT t.tgisinternal
ORDER BY table_name, trigger_name

-- name: statistics
-- Extended statistics objects (the planner's estimates for expressions and column groups).
SELECT c.relname AS table_name, s.stxname AS statistics_name,
       pg_get_statisticsobjdef(s.oid) AS definition
FROM pg_statistic_ext s
JOIN pg_class c ON c.oid = s.stxrelid
JOIN pg_namespace n ON n.oid = s.stxnamespace
WHERE n.nspname = 'public'
ORDER BY table_name, statistics_name

-- name: views
SELECT c.relname AS view_name, c.relkind::text AS kind,
       pg_get_viewdef(c.oid) AS definition
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm')
ORDER BY view_name

-- name: sequences
SELECT c.relname AS sequence_name, format_type(s.seqtypid, NULL) AS type,
       s.seqstart AS start_value, s.seqincrement AS increment,
       s.seqmin AS min_value, s.seqmax AS max_value, s.seqcache AS cache, s.seqcycle AS cycles,
       coalesce(owner.relname || '.' || a.attname, '') AS owned_by
FROM pg_sequence s
JOIN pg_class c ON c.oid = s.seqrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
    AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
LEFT JOIN pg_class owner ON owner.oid = d.refobjid
LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE n.nspname = 'public'
ORDER BY sequence_name, owned_by

-- name: types
-- Enum labels and domain definitions: format_type in `columns` shows only their names.
SELECT t.typname AS type_name, t.typtype::text AS kind,
       CASE t.typtype
           WHEN 'e' THEN (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                          FROM pg_enum e WHERE e.enumtypid = t.oid)
           WHEN 'd' THEN format_type(t.typbasetype, t.typtypmod)
               || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
               || coalesce(' DEFAULT ' || t.typdefault, '')
       END AS definition
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'r', 'm')
ORDER BY type_name

-- name: domain_constraints
SELECT t.typname AS type_name, con.conname AS constraint_name,
       pg_get_constraintdef(con.oid) AS definition
FROM pg_constraint con
JOIN pg_type t ON t.oid = con.contypid
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = 'public'
ORDER BY type_name, constraint_name

-- name: extensions
-- Extensions whose objects live in public (their functions show up in `functions` too).
SELECT e.extname AS extension_name, e.extversion AS version
FROM pg_extension e
JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE n.nspname = 'public'
ORDER BY extension_name

-- name: public_relations
-- Everything with a pg_class row left in public (tables, views, sequences, indexes...).
SELECT c.relname AS relation_name, c.relkind::text AS kind
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public'
ORDER BY relation_name

-- name: public_functions
SELECT p.proname AS function_name, pg_get_function_identity_arguments(p.oid) AS arguments
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public'
ORDER BY function_name, arguments

-- name: public_types
-- User-defined types left behind: enums, domains, ranges (row and array types go with
-- their table or element type, so they are not listed here).
SELECT t.typname AS type_name, t.typtype::text AS kind
FROM pg_type t
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = 'public' AND t.typrelid = 0 AND t.typelem = 0
ORDER BY type_name

-- name: single_column_uuid_primary_keys
-- Primary keys of exactly one uuid column, with that column's default (NULL: none).
SELECT c.relname AS table_name, a.attname AS column_name,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr
FROM pg_index x
JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = x.indkey[0]
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND x.indisprimary AND x.indnkeyatts = 1
  AND a.atttypid = 'uuid'::regtype
ORDER BY table_name

-- name: uuid_v7_series
-- $1 values of uuid_generate_v7(), one per row of a plain scan, so in the order generated.
SELECT n, uuid_generate_v7() AS id FROM generate_series(1, $1::int) AS n

-- name: uuid_v7
SELECT uuid_generate_v7()

-- name: applied_revisions
SELECT version_num FROM alembic_version ORDER BY version_num

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
