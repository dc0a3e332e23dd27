//! The S3 requests the tier sends: GET, PUT (conditional or not) and
//! DELETE of one object, each signed by rusty-s3 (AWS signature version 4,
//! in the query string, valid for a few minutes) and sent by ureq's
//! blocking client under the call's deadline.
//!
//! Answers are sorted for the store: found, absent, already there (a
//! conditional put refused), refused (403: credentials or policy), or
//! failed (no answer in time, a connection error, 5xx, throttling), the
//! last opening the breaker.

use std::io::Read;
use std::time::{Duration, Instant};

use std::sync::Arc;

use rusty_s3::{Bucket, S3Action, UrlStyle};
use ureq::Agent;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    ConnectProxyConnector, Connector, RustlsConnector, TcpConnector,
};

use crate::config::BucketConfig;

mod ahead;
pub(crate) mod workers;

pub(crate) use ahead::Ahead;
use ahead::TakeAhead;

/// How long a signed request stays valid: longer than any call's deadline.
const SIGNATURE_LIFETIME: Duration = Duration::from_secs(300);

/// What one request answered.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A GET's body, whole; a PUT or DELETE that was done.
    Done(Vec<u8>),
    /// No such object (404).
    Absent,
    /// A conditional PUT refused because the object exists (412).
    Exists,
    /// A body longer than the entry limit: nothing kiln writes or reads.
    TooLong,
    /// The bucket refused the request (403, other 4xx): what it said.
    Refused(String),
    /// No answer in time, a broken connection, a server error or
    /// throttling: what happened.
    Failed(String),
}

/// The signer and the HTTP client of one bucket.
#[derive(Debug)]
pub(crate) struct Client {
    bucket: Bucket,
    credentials: Option<rusty_s3::Credentials>,
    agent: Agent,
    limit: u64,
    /// The connection opened ahead of the first request.
    pub(crate) ahead: Arc<Ahead>,
}

impl Client {
    pub(crate) fn new(config: &BucketConfig) -> Result<Self, String> {
        let style = if config.endpoint_named {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let bucket = Bucket::new(
            config.endpoint.clone(),
            style,
            config.bucket.clone(),
            config.region.clone(),
        )
        .map_err(|error| format!("{error:?}"))?;
        let credentials = config
            .credentials
            .as_ref()
            .map(|credentials| match &credentials.token {
                Some(token) => rusty_s3::Credentials::new_with_token(
                    credentials.key_id.clone(),
                    credentials.secret.clone(),
                    token.clone(),
                ),
                None => rusty_s3::Credentials::new(
                    credentials.key_id.clone(),
                    credentials.secret.clone(),
                ),
            });
        // rustls on aws-lc-rs, named here: ureq picks ring by itself only
        // with its `rustls` feature, which brings a second getrandom.
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .build();
        let agent_config = Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            // A batch's lookup and the failure memories read beside it
            // each keep their connections for the next call.
            .max_idle_connections_per_host(config.concurrency.max(1).saturating_mul(2))
            .max_idle_connections(config.concurrency.max(1).saturating_mul(4))
            .build();
        // ureq's own chain (an HTTP proxy, TCP, rustls), with the
        // connection opened ahead offered before a new one is opened.
        let ahead = Arc::new(Ahead::default());
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(TakeAhead(Arc::clone(&ahead)))
                .chain(TcpConnector::default())
                .chain(RustlsConnector::default());
        let agent = Agent::with_parts(agent_config, connector, DefaultResolver::default());
        Ok(Self {
            bucket,
            credentials,
            agent,
            limit: config.max_entry_bytes,
            ahead,
        })
    }

    /// Opens connections to the bucket on a thread of its own, each
    /// within `timeout`, until `count` wait for the next requests that
    /// would open one (none through an HTTP proxy, whose chain link opens
    /// its own).
    pub(crate) fn connect_ahead(&self, timeout: Duration, count: usize) {
        if self.agent.config().proxy().is_some() {
            return;
        }
        let url = self.bucket.base_url();
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            self.ahead.connect(host.to_owned(), port, timeout, count);
        }
    }

    /// GET `object`, its body read up to the entry limit, all by
    /// `deadline`.
    pub(crate) fn get(&self, object: &str, deadline: Instant) -> Answer {
        let Some(left) = remaining(deadline) else {
            return Answer::Failed("the call's time ran out before this request".to_owned());
        };
        let url = self
            .bucket
            .get_object(self.credentials.as_ref(), object)
            .sign(SIGNATURE_LIFETIME);
        let sent = self
            .agent
            .get(url.as_str())
            .config()
            .timeout_global(Some(left))
            .build()
            .call();
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return Answer::Failed(error.to_string()),
        };
        let status = response.status().as_u16();
        if status != 200 {
            return sorted(status, "GET");
        }
        let length = response.body().content_length();
        if length.is_some_and(|length| length > self.limit) {
            return Answer::TooLong;
        }
        // Read through a bounded reader, so a body longer than its header
        // said (or with none) stops at the limit and is never held whole.
        let capacity = length.map_or(64 << 10, |length| length as usize);
        let mut body = Vec::with_capacity(capacity);
        let reader = response.body_mut().with_config().limit(u64::MAX).reader();
        match reader.take(self.limit + 1).read_to_end(&mut body) {
            Ok(_) if body.len() as u64 > self.limit => Answer::TooLong,
            Ok(_) => Answer::Done(body),
            Err(error) => Answer::Failed(format!("the body was cut off ({error})")),
        }
    }

    /// PUT `body` as `object`; with `create_only`, only where no object
    /// is (`If-None-Match: *`, honoured by AWS S3 and refused with 412).
    pub(crate) fn put(
        &self,
        object: &str,
        body: &[u8],
        create_only: bool,
        deadline: Instant,
    ) -> Answer {
        let Some(left) = remaining(deadline) else {
            return Answer::Failed("the call's time ran out before this request".to_owned());
        };
        let url = self
            .bucket
            .put_object(self.credentials.as_ref(), object)
            .sign(SIGNATURE_LIFETIME);
        let mut request = self
            .agent
            .put(url.as_str())
            .header("content-type", "application/octet-stream");
        if create_only {
            request = request.header("if-none-match", "*");
        }
        let sent = request
            .config()
            .timeout_global(Some(left))
            .build()
            .send(body);
        match sent {
            Ok(response) => match response.status().as_u16() {
                200 | 201 | 204 => Answer::Done(Vec::new()),
                status => sorted(status, "PUT"),
            },
            Err(error) => Answer::Failed(error.to_string()),
        }
    }

    /// DELETE `object` (absent already is done too).
    pub(crate) fn delete(&self, object: &str, deadline: Instant) -> Answer {
        let Some(left) = remaining(deadline) else {
            return Answer::Failed("the call's time ran out before this request".to_owned());
        };
        let url = self
            .bucket
            .delete_object(self.credentials.as_ref(), object)
            .sign(SIGNATURE_LIFETIME);
        let sent = self
            .agent
            .delete(url.as_str())
            .config()
            .timeout_global(Some(left))
            .build()
            .call();
        match sent {
            Ok(response) => match response.status().as_u16() {
                200 | 202 | 204 | 404 => Answer::Done(Vec::new()),
                status => sorted(status, "DELETE"),
            },
            Err(error) => Answer::Failed(error.to_string()),
        }
    }
}

/// What is left of the call's time; `None` when none is.
fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
}

/// An answer other than success, sorted by its status.
fn sorted(status: u16, method: &str) -> Answer {
    match status {
        404 => Answer::Absent,
        412 => Answer::Exists,
        429 | 500..=599 => Answer::Failed(format!(
            "the bucket answered {method} with {status} (busy, throttling or failing)"
        )),
        _ => Answer::Refused(format!(
            "the bucket refused {method} with {status} (credentials, policy or region)"
        )),
    }
}

/// Runs `each` on every item of `items`, at most `limit` at once, and
/// answers in their order: a batch's requests go out together, bounded,
/// never one round trip after another. One item runs on the caller's
/// thread.
pub(crate) fn concurrently<T: Sync, R: Send>(
    items: &[T],
    limit: usize,
    each: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(each).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let answers: std::sync::Mutex<Vec<Option<R>>> =
        std::sync::Mutex::new((0..items.len()).map(|_| None).collect());
    let work = || {
        loop {
            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(index) else {
                break;
            };
            let answer = each(item);
            answers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)[index] = Some(answer);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..limit.clamp(1, items.len()) {
            // A thread that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
    answers
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|answer| answer.expect("every item was answered by one worker"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_answers_come_in_the_items_order_and_overlap_within_the_bound() {
        // P16: a batch's lookups go out together, bounded.
        use std::sync::atomic::{AtomicUsize, Ordering};
        let items: Vec<u64> = (0..12).collect();
        let (in_flight, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let answers = concurrently(&items, 4, |item| {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(30));
            in_flight.fetch_sub(1, Ordering::SeqCst);
            item * 2
        });
        assert_eq!(
            answers,
            items.iter().map(|item| item * 2).collect::<Vec<_>>()
        );
        let most = most.load(Ordering::SeqCst);
        assert!((2..=4).contains(&most), "{most} requests at once");
    }

    #[test]
    fn statuses_are_sorted_for_the_store() {
        assert!(matches!(sorted(404, "GET"), Answer::Absent));
        assert!(matches!(sorted(412, "PUT"), Answer::Exists));
        for status in [429, 500, 503] {
            assert!(matches!(sorted(status, "GET"), Answer::Failed(_)));
        }
        assert!(matches!(sorted(403, "GET"), Answer::Refused(_)));
    }
}
