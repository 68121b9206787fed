-- What a SCHEDULE record and the record the schedule re-put from it share (chained.sql): the
-- message, group and broker, the ORIGIN_MESSAGE_ID, the delay level and the reconsume times.
run_id, message_key, `group`, broker, rec_origin_msg_id, delay_level, reconsume_times
