-- 0010_webhook_sources: `webhook_events` takes the events of the bounce sources of issue 45
-- (Mailgun, SendGrid, Brevo, Amazon SES through SNS; 'dsn' taken now for the delivery status
-- notifications of the DSN part of issue 45, not built yet); SQLite's
-- schema/0023_webhook_sources.sql. Only the check on `source` changes: the constraint 0001
-- made (PostgreSQL named it webhook_events_source_check) is replaced. Append-only.
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_source_check;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_source_check
    CHECK (source IN ('twilio', 'postmark', 'resend', 'standard',
                      'mailgun', 'sendgrid', 'brevo', 'ses', 'dsn'));
