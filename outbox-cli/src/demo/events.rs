//! The demo's events: what the shop writes with each order (no I/O; the store writes them
//! in its own transactions).

use outboxkit_core::NewMessage;

/// The demo's business events.
pub fn demo_event(n: u32) -> (String, NewMessage) {
    let topic = match n % 3 {
        0 => "customer.updated",
        1 => "order.created",
        _ => "order.paid",
    };
    let poison = n % 50 == 49;
    let mut m = NewMessage::new(topic, serde_json::json!({ "n": n, "order": format!("ord-{n}"), "poison": poison, "subject": format!("Order {n}"), "text": "Thank you for your order." }))
        .tenant("acme")
        .idempotency_key(format!("demo-{n}"))
        .ordering_key(format!("order:{}", n % 25));
    if n.is_multiple_of(20) {
        m = m.email(format!("customer{n}@example.com"));
    }
    (format!("ord-{n}"), m)
}
