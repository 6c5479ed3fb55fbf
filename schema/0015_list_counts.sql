-- 0015_list_counts: what the list pages show without counting memberships, and indexes for
-- the recipients page's failed/suppressed filter and the list page's membership filter (at
-- the end). `list_counts` keeps, per list and membership state, how many members are in that
-- state; triggers on
-- `list_members` keep it in the same transaction as every insert, state change and delete,
-- whatever code path made it short of an INSERT OR REPLACE (a REPLACE's delete fires no trigger
-- without recursive_triggers; no statement of sendonce replaces a membership or a send; the
-- same pattern as 0014's campaign_counts), and a removed list's
-- counters go with it. The tests compare both tables with a full count of the rows
-- (tests/common/mod.rs, `assert_counters`: after the crash runs, the list, opt-in, unsubscribe
-- and dashboard tests, and every fixture's upgrade). Append-only.
CREATE TABLE list_counts (
    list_id INTEGER NOT NULL,
    status  TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (list_id, status)
) WITHOUT ROWID;
INSERT INTO list_counts (list_id, status, n)
    SELECT list_id, status, count(*) FROM list_members GROUP BY list_id, status;
CREATE TRIGGER list_members_count_insert AFTER INSERT ON list_members BEGIN
    INSERT INTO list_counts (list_id, status, n) VALUES (new.list_id, new.status, 1)
        ON CONFLICT (list_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER list_members_count_update AFTER UPDATE OF status, list_id ON list_members
    WHEN old.status IS NOT new.status OR old.list_id IS NOT new.list_id BEGIN
    UPDATE list_counts SET n = n - 1 WHERE list_id = old.list_id AND status = old.status;
    INSERT INTO list_counts (list_id, status, n) VALUES (new.list_id, new.status, 1)
        ON CONFLICT (list_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER list_members_count_delete AFTER DELETE ON list_members BEGIN
    UPDATE list_counts SET n = n - 1 WHERE list_id = old.list_id AND status = old.status;
END;
CREATE TRIGGER lists_count_delete AFTER DELETE ON lists BEGIN
    DELETE FROM list_counts WHERE list_id = old.id;
END;
-- A campaign's failed and suppressed sends in id order, for the recipients page's state filter
-- (in doubt has sends_doubt, queued and leased sends_claim). Only a send entering or leaving
-- those states touches it; the send path's statements never name them.
CREATE INDEX sends_unsent ON sends(campaign_id, status) WHERE status IN ('failed', 'suppressed');
-- A list's members who are not subscribed (unsubscribed, pending: few among many), in
-- subscriber order, for the list page's membership filter.
CREATE INDEX list_members_state ON list_members(list_id, status, subscriber_id)
    WHERE status <> 'subscribed';
