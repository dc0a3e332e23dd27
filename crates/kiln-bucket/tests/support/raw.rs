//! The test bucket's objects read and written past the store (as an
//! attacker or a damaged disk would), for the tests that forge them.

use std::time::Duration;

use rusty_s3::{Bucket, S3Action, UrlStyle};

use super::support::{BUCKET, Garage};

/// Writes `bytes` as `object` of the test bucket, past the store.
pub fn raw_put(garage: &Garage, object: &str, bytes: &[u8]) {
    let (bucket, credentials) = raw(garage);
    let url = bucket
        .put_object(Some(&credentials), object)
        .sign(Duration::from_secs(60));
    let response = ureq::put(url.as_str())
        .send(bytes)
        .expect("the raw put is sent");
    assert_eq!(response.status().as_u16(), 200, "the raw put is taken");
}

pub fn raw_get(garage: &Garage, object: &str) -> Vec<u8> {
    let (bucket, credentials) = raw(garage);
    let url = bucket
        .get_object(Some(&credentials), object)
        .sign(Duration::from_secs(60));
    ureq::get(url.as_str())
        .call()
        .expect("the raw get is answered")
        .body_mut()
        .read_to_vec()
        .expect("the body is read")
}

fn raw(garage: &Garage) -> (Bucket, rusty_s3::Credentials) {
    let endpoint = url::Url::parse(&format!("http://127.0.0.1:{}", garage.port)).expect("a URL");
    let bucket = Bucket::new(endpoint, UrlStyle::Path, BUCKET, "garage").expect("a bucket");
    let credentials = rusty_s3::Credentials::new(
        garage.credentials.key_id.clone(),
        garage.credentials.secret.clone(),
    );
    (bucket, credentials)
}
