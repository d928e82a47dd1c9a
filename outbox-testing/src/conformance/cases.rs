//! The conformance cases: one `pub async fn` per behaviour, each taking a fresh [`Fixture`].
//! Every case listed in `__conformance_cases!` at the bottom runs against every store.
//!
//! Cases use only the public store traits, take time from the fixture's `ManualClock`, and
//! never depend on each other. They are grouped by subject in the modules below and
//! re-exported here, so each is `outboxkit_testing::conformance::cases::<name>`.

mod budget;
mod cancel;
mod catalogue;
mod claim;
mod delayed;
mod detail;
mod endpoint_headers;
mod endpoints;
mod enqueue;
mod fairness;
mod fencing;
mod fifo;
mod held;
mod helpers;
mod history;
mod ledger;
mod operator;
mod order;
mod paused;
mod permits;
mod retention;
mod roundtrip;

mod activity;
mod console;
mod tenancy;
mod tokens;
mod verdicts;
mod waiting;

pub use budget::*;
pub use cancel::*;
pub use catalogue::*;
pub use claim::*;
pub use delayed::*;
pub use detail::*;
pub use endpoint_headers::*;
pub use endpoints::*;
pub use enqueue::*;
pub use fairness::*;
pub use fencing::*;
pub use fifo::*;
pub use held::*;
pub use history::*;
pub use ledger::*;
pub use operator::*;
pub use order::*;
pub use paused::*;
pub use permits::*;
pub use retention::*;
pub use roundtrip::*;

pub use activity::*;
pub use console::*;
pub use tenancy::*;
pub use tokens::*;
pub use verdicts::*;
pub use waiting::*;

#[allow(unused_imports)]
use super::Fixture;

/// The cases that `token_conformance_tests!` generates tests for: those that need a
/// [`outboxkit_core::TokenStore`] ([`Fixture::tokens`]). Add every new token case here.
#[doc(hidden)]
#[macro_export]
macro_rules! __token_conformance_cases {
    ($setup:path) => {
        $crate::__conformance_case!($setup;
            tokens_round_trip,
            token_create_refuses_duplicates_and_bad_labels,
            unknown_token_is_not_found,
            revoked_token_stays_revoked,
        );
    };
}

/// The cases that `console_conformance_tests!` generates tests for: those that need a
/// [`outboxkit_core::ConsoleStore`] ([`Fixture::console`]). Add every new console case here.
#[doc(hidden)]
#[macro_export]
macro_rules! __console_conformance_cases {
    ($setup:path) => {
        $crate::__conformance_case!($setup;
            audit_lists_newest_first_with_stable_cursor,
            audit_is_scoped_by_tenant,
            audit_refuses_bad_entries,
            audit_purge_removes_only_older_entries,
            sessions_round_trip_and_delete,
            sessions_expire,
            sessions_are_bounded_per_token,
            token_sessions_end_together,
            activity_counts_every_bucket,
            activity_is_scoped,
            activity_refuses_unbounded_ranges,
        );
    };
}

/// The list of cases that `conformance_tests!` generates tests for: every case that needs
/// only the [`outboxkit_core::Store`] traits. Add every new case here (or, when it needs a
/// token store, in `__token_conformance_cases!`).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($setup:path) => {
        $crate::__conformance_case!($setup;
            event_types_round_trip,
            event_type_with_a_bad_schema_writes_nothing,
            catalogue_off_accepts_anything,
            refuse_unknown_refuses_and_writes_nothing,
            catalogue_refuses_a_batch_whole,
            validate_refuses_a_failing_payload_naming_the_path,
            a_catalogue_change_through_another_handle_is_enforced,
            empty_allowlist_is_refused,
            fifo_endpoint_delivers_one_at_a_time_in_enqueue_order,
            fifo_held_head_and_paused_endpoint_hold_everything_behind,
            fifo_stranded_head_is_claimed_again_first,
            fifo_exhausted_head_dies_and_the_next_is_claimed,
            fifo_dormant_topic_does_not_hold_the_endpoint,
            fifo_endpoint_leaves_the_batch_to_other_groups,
            fifo_replay_takes_its_first_place,
            fifo_toggle_applies_to_deliveries_enqueued_afterwards,
            fifo_flag_round_trips,
            enqueue_claim_complete_round_trip,
            idempotent_enqueue,
            invalid_message_writes_nothing,
            batch_enqueue_is_all_or_nothing,
            fan_out_at_enqueue,
            wake_listener_wakes_on_enqueue,
            caused_by_round_trips,
            wake_listener_wakes_on_operator_calls,
            idempotent_enqueue_under_concurrency,
            claim_takes_due_oldest_first_up_to_batch,
            delayed_message_appears_when_due,
            claim_skips_excluded_endpoints,
            claim_gives_every_group_a_turn,
            claim_takes_no_more_than_an_endpoint_has_room_for,
            claim_shares_a_batch_between_backlogs,
            claim_is_exclusive,
            stranded_claim_is_claimable_after_lease,
            a_stranded_claim_takes_its_place_at_its_lease_end,
            stale_token_is_fenced,
            forged_tenant_lease_is_fenced,
            late_completion_with_matching_token_is_accepted,
            extend_keeps_lease_alive,
            exhausted_rows_die_at_claim,
            claim_kills_exhausted_rows_beyond_its_batch,
            a_retried_last_attempt_dies_without_a_place_in_the_batch,
            a_retried_last_attempt_holds_its_key_until_it_is_due,
            successive_claims_kill_every_exhausted_row,
            claim_order_follows_the_fair_rounds,
            release_refunds_and_delays,
            ordering_key_is_fifo_per_destination,
            dormant_topic_does_not_block,
            claim_serves_only_named_sources,
            claim_budget_is_per_source,
            verdict_succeeded,
            verdict_retry_uses_policy_delay,
            verdict_gone_disables_endpoint,
            verdict_dead_on_exhausted_budget,
            verdict_dead_permanent,
            snooze_refunds_attempt,
            snooze_cap_counts_as_retry,
            paused_endpoint_parks_without_spending,
            removed_and_disabled_endpoint_dead,
            verdict_redirect_and_4xx_retry,
            verdict_mail_refused_dead,
            verdict_held_then_probe_is_free,
            held_probe_spends_no_attempt,
            release_held_makes_due_now,
            held_probe_2xx_succeeds,
            held_probe_410_is_gone,
            replay_only_dead,
            replay_across_tenants_is_not_found,
            retry_now_makes_due,
            tenant_isolation_of_ledger,
            tenant_isolation_of_endpoints,
            secret_rotation_releases_held,
            url_change_releases_held,
            endpoint_crud_round_trip,
            endpoint_headers_round_trip,
            bad_endpoint_headers_change_nothing,
            consumers_upsert_and_list,
            ledger_records_attempts,
            ledger_lists_newest_first_with_stable_cursor,
            ledger_filters,
            mark_sending_then_stranded_send_is_flagged,
            complete_many_mixed_results,
            complete_many_all_finishing,
            purge_removes_only_finished_before_cutoff,
            purge_rotates_over_tenants,
            purge_keeps_a_message_until_its_last_delivery_goes,
            purge_rotation_serves_a_tenant_with_only_messages,
            stats_counts_and_oldest_due_age,
            queue_stats_are_the_unfinished_part_of_stats,
            permits_up_to_the_rate_then_wait,
            permits_free_a_second_after_each_grant,
            permits_are_shared_by_handles_on_one_backend,
            permits_are_per_endpoint_and_tenant,
            permits_refuse_a_bad_rate,
            stats_oldest_due_counts_a_deleted_consumers_deliveries,
            messages_round_trip_byte_for_byte,
            endpoints_round_trip,
            attempts_round_trip,
            held_probe_5xx_or_timeout_returns_to_schedule,
            reset_held_gives_fresh_budget,
            paused_endpoint_holds_then_resumes_in_order,
            pause_holds_queued_deliveries,
            disabled_endpoint_holds_until_reenabled,
            rotating_a_waiting_endpoints_secret_keeps_its_hold,
            disabled_endpoint_hold_expires,
            deleted_endpoint_gets_nothing,
            await_endpoint_after_resume_is_pending,
            resume_keeps_a_delayed_message_until_its_time,
            release_held_keeps_a_delayed_message_until_its_time,
            secret_rotation_releases_a_probe_now_not_a_delayed_message,
            paused_consumer_holds_pending_and_new,
            resumed_consumer_releases_in_order,
            resumed_consumer_keeps_a_delayed_message,
            put_consumer_keeps_a_pause,
            pausing_an_unknown_consumer_is_not_found,

            purge_tenant_touches_only_its_tenant,
            purge_honours_tenant_windows,
            purge_rotation_visits_every_tenant_with_windows,
            stats_are_scoped_by_tenant_and_endpoint,
            tenants_are_listed_with_counts,
            ledger_records_schedule_and_payload,
            replay_starts_a_new_run,
            ledger_filters_by_ordering_key_and_text,
            endpoint_shows_last_delivery,
            cancel_pending_makes_it_dead,
            cancel_held_makes_it_dead,
            cancel_in_flight_is_a_conflict,
            cancel_finished_is_a_conflict,
            cancel_across_tenants_is_not_found,
            cancel_message_cancels_what_waits,
            cancel_releases_the_key_barrier,
            replay_after_cancel_sends_again,
            attempt_detail_round_trips_byte_for_byte,
            attempt_without_detail_reads_none,
            retried_delivery_keeps_a_detail_per_attempt,
            replay_keeps_earlier_attempt_details,
            held_probe_keeps_its_detail,
            purge_removes_attempt_details,
        );
    };
}
