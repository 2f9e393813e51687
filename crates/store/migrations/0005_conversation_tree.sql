-- Conversations become trees: every message has a parent (NULL for the
-- first message of a chat), so a regenerated answer is kept beside the old
-- one (siblings under the same user message) and an edited message starts a
-- new branch while the old one stays reachable.
--
-- Which branch is shown: among siblings, the one with the largest `chosen`
-- (a per-chat counter, raised when a message is added or picked), so each
-- subtree remembers its own last choice. The active path is the chosen root,
-- then its chosen child, and so on down to a leaf.
ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages (id);
ALTER TABLE messages ADD COLUMN chosen INTEGER NOT NULL DEFAULT 0;

-- A flat chat becomes a chain: each message's parent is the one before it.
UPDATE messages SET parent_id = (
    SELECT MAX(p.id) FROM messages p WHERE p.chat_id = messages.chat_id AND p.id < messages.id
);
-- ids only grow, so the chain's order is also its choice order
UPDATE messages SET chosen = id;

CREATE INDEX messages_by_parent ON messages (parent_id, chosen);
