//! The foundation's promises, against a real PostgreSQL: same-transaction enqueue, batches, notifications and
//! migrations.

mod bad_header_name_writes_nothing;
mod bad_payload_writes_nothing;
mod batch_enqueue_is_one_statement;
mod enqueue_commits_or_rolls_back_with_the_domain_change;
mod events;
mod events_written_with_the_commit_share_its_fate;
mod inbox_processes_each_event_once;
mod migrations_are_idempotent_and_coexist;
mod notify_arrives_only_after_commit;
mod same_promises_on_both_backends;
