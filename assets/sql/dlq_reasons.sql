-- dlq_reasons (staging): every DLQ record with its reason, or NULL when nothing explains it (the
-- shared fragment dlq_explained, the rules of dlq_only_after_max_retries), evaluated once for
-- dlq_messages and anomalies.
CREATE OR REPLACE TEMP TABLE dlq_reasons AS
{{dlq_explained}};
