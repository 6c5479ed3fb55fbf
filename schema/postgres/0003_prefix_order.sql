-- 0003_prefix_order: the dashboard's prefix searches (a list's members by address, an
-- account's suppressions) compare and order addresses in the "C" collation, byte order, as
-- SQLite does: under a linguistic database collation a prefix is not a range of the column's
-- own order (ICU sorts "zoe:" before "zoe9"), so a range in it misses matches. These indexes
-- serve those ranges. Append-only.
CREATE INDEX subscribers_email_c ON subscribers(account_id, email_norm COLLATE "C")
    WHERE email_norm IS NOT NULL;
CREATE INDEX subscribers_phone_c ON subscribers(account_id, phone COLLATE "C")
    WHERE phone IS NOT NULL;
CREATE INDEX suppressions_address_c ON suppressions(account_id, channel, address COLLATE "C");
