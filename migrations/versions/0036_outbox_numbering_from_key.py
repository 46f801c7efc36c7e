"""Event numbering resumes where its previous batch ended; outbox_events is vacuumed sooner.

A numbering run drained its batches each from the head of ``outbox_events_unsequenced_idx``
(the events without a position), where the entries of events already numbered stay until a
vacuum: after a sweep wrote a million events, each batch of 500 read every entry the batches
before it had left, and numbering them took 57 s (quadratic), while the 1,000 streams of the
benchmark waited 160 ms at p50 for their events. ``outbox_sequence_from()`` takes the key
where the run's previous batch ended and returns the key of its own last event;
``outbox_sequence()`` stays, as that function from the head, for a replica of the previous
release during an upgrade.

Between runs the head is cleaned by autovacuum, now after 1 % of the table's rows changed
(plus 1,000) rather than 20 %: every event is numbered once, so the table's dead entries
grow with every write.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

UPGRADE = r"""
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

CREATE OR REPLACE FUNCTION outbox_sequence(batch integer) RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    SELECT numbered FROM outbox_sequence_from(batch, NULL, NULL)
$$;

ALTER TABLE outbox_events
    SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
"""

DOWNGRADE = r"""
ALTER TABLE outbox_events RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);

CREATE OR REPLACE FUNCTION outbox_sequence(batch integer) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    numbered bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(outbox_sequence_lock());
    WITH due AS (
        SELECT e.event_id FROM outbox_events e
        WHERE e.position IS NULL
        ORDER BY e.created_at, e.event_id
        LIMIT batch
    ), numbers AS (
        SELECT due.event_id, nextval('outbox_events_position_seq') AS position FROM due
    )
    UPDATE outbox_events e SET position = numbers.position
    FROM numbers
    WHERE e.event_id = numbers.event_id AND e.position IS NULL;
    GET DIAGNOSTICS numbered = ROW_COUNT;
    RETURN numbered;
END
$$;

DROP FUNCTION outbox_sequence_from(integer, timestamptz, uuid);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
