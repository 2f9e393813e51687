-- How a chat's replies are shaped: NULL for free text, else the app's JSON
-- description of it ({"kind": "json"}, {"kind": "fields", ...},
-- {"kind": "schema", ...}); the store keeps it as it is given.
ALTER TABLE chats ADD COLUMN answer_format TEXT;
