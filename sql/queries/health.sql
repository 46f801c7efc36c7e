-- Liveness of the database connection.

-- name: ping
SELECT 1
