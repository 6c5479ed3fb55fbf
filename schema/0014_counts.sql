-- 0014_counts: what a campaign's pages show without counting its sends. `campaign_counts` keeps,
-- per campaign and send state, how many sends are in that state; triggers on `sends` keep it in
-- the same transaction as every insert, state change and delete, whatever code path made it, so
-- it can never disagree with the rows (tests/dashboard_counts.rs compares them after a crash
-- run). `sends_campaign_order` orders a campaign's sends by id for the report's pages; it is on
-- the expression `campaign_id + 0` so that only the statements that name that expression use it
-- (the send path's statements keep their partial indexes), and since neither column ever
-- changes, a state change never touches it. Append-only.
CREATE TABLE campaign_counts (
    campaign_id INTEGER NOT NULL,
    status      TEXT NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, status)
) WITHOUT ROWID;
INSERT INTO campaign_counts (campaign_id, status, n)
    SELECT campaign_id, status, count(*) FROM sends GROUP BY campaign_id, status;
CREATE TRIGGER sends_count_insert AFTER INSERT ON sends BEGIN
    INSERT INTO campaign_counts (campaign_id, status, n) VALUES (new.campaign_id, new.status, 1)
        ON CONFLICT (campaign_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER sends_count_update AFTER UPDATE OF status, campaign_id ON sends
    WHEN old.status IS NOT new.status OR old.campaign_id IS NOT new.campaign_id BEGIN
    UPDATE campaign_counts SET n = n - 1
        WHERE campaign_id = old.campaign_id AND status = old.status;
    INSERT INTO campaign_counts (campaign_id, status, n) VALUES (new.campaign_id, new.status, 1)
        ON CONFLICT (campaign_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER sends_count_delete AFTER DELETE ON sends BEGIN
    UPDATE campaign_counts SET n = n - 1
        WHERE campaign_id = old.campaign_id AND status = old.status;
END;
CREATE INDEX sends_campaign_order ON sends(campaign_id + 0, id);
