-- The stable code of a failed reply's error (the engine's INVALID_IMAGE,
-- CONTEXT_LENGTH_EXCEEDED, …), beside its message, so the app can explain
-- the failure without reading the message text. NULL for replies that
-- failed before codes were kept, and for every reply that did not fail.
ALTER TABLE messages ADD COLUMN error_code TEXT;
