-- 0019_report_ids: the provider's id of the message a delivery report names (Twilio
-- `MessageSid`, Postmark `MessageID`, Resend `data.email_id`, Standard `data.message_id`),
-- kept with the event. A row in doubt that a report settles as sent takes it as its
-- `sends.provider_message_id` when it has none (the worker never recorded the provider's
-- answer), whether the report settles it on arrival or the claim settles it later from the
-- kept report. NULL for every event before this migration, for events that are not delivery
-- reports and for reports that name no message. At most 512 characters, as the event id
-- (sendonce refuses more than 512 bytes). Append-only.
ALTER TABLE webhook_events ADD COLUMN provider_message_id TEXT
    CHECK (provider_message_id IS NULL OR length(provider_message_id) BETWEEN 1 AND 512);
