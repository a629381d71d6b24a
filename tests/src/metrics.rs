//! A server's Prometheus metrics, read from its `--metrics-listen` port.

use crate::http::{http_client, Resp};

/// The metrics text served on `port`: answered 200 as `text/plain`.
pub async fn scrape(port: u16) -> String {
    let r = Resp::read(http_client().get(format!("http://127.0.0.1:{port}/metrics"))).await.expect("scrape");
    assert_eq!(r.status, 200, "{r}");
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/plain")), "{r}");
    r.text
}

/// The value of one series, by its exact name and labels as rendered.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
}
