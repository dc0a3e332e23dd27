//! A panic of user code — a generator, a compiler — told as its message.

use std::any::Any;

/// The message a panic was raised with, from the payload
/// [`catch_unwind`](std::panic::catch_unwind) returned: `panic!`'s formatted
/// text or literal, or a placeholder for any other payload.
///
/// Takes the payload itself, not a reference, so that a `&Box` cannot be
/// passed by mistake and downcast as the box instead of what it holds.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .copied()
            .unwrap_or("a panic without a message")
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_panic_gives_its_text() {
        let payload =
            std::panic::catch_unwind(|| panic!("kernel {} failed", 7)).expect_err("it panics");
        assert_eq!(panic_message(payload), "kernel 7 failed");
    }

    #[test]
    fn a_literal_panic_gives_its_text() {
        let payload: Box<dyn Any + Send> = Box::new("no source");
        assert_eq!(panic_message(payload), "no source");
    }

    #[test]
    fn any_other_payload_gives_the_placeholder() {
        let payload: Box<dyn Any + Send> = Box::new(42_u32);
        assert_eq!(panic_message(payload), "a panic without a message");
    }
}
