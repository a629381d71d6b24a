//! GET /jobs/{jobId}/logs?follow=true: a running attempt's log streamed as
//! it is written, a chunked `text/plain` answer that ends when the attempt
//! ends (docs/jobs.md). Where the attempt stands is the API's
//! (`api::jobs::follow`), the bytes the job driver's
//! (`compute::driver::JobDriver::follow`: the container's output, then the
//! rest of the published log); this file carries them. An attempt whose
//! container runs on another node is followed there: the request is passed
//! on to that node (`forward.rs`), or, when it cannot be, answered here from
//! the published log once the attempt ends.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use grid_core::error::ApiError;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Request, Response};

use super::forward;
use super::respond::{self, Resp};
use crate::api::jobs::Follow;
use crate::app::App;
use crate::store::accounts::Caller;

pub async fn follow(
    app: &Arc<App>,
    caller: &Caller,
    id: &str,
    attempt: Option<u32>,
    req: Request<Incoming>,
) -> Result<Resp, ApiError> {
    if !crate::api::is_compute(id) {
        return Err(ApiError::UnknownItemOrJob);
    }
    let driver = &app.compute.driver;
    match crate::api::jobs::follow(app, caller, id, attempt).await? {
        Follow::Ended(reply) => Ok(respond::reply(reply)),
        Follow::Running { job_id, attempt, container, node: None } => {
            Ok(streamed(driver.follow(&job_id, attempt, Some(container)), attempt))
        }
        Follow::Running { job_id, attempt, node: Some(node), .. } => {
            // A forwarded request is never passed on again.
            if !forward::from_peer(app, req.headers()) {
                if let Ok(Some(to)) = app.peers.address(&node).await {
                    if let Ok(resp) = forward::forward(app, &to, req, ApiError::Internal).await {
                        return Ok(resp);
                    }
                }
            }
            tracing::info!(job = %job_id, %node, "followed log's node not reachable; answering from the published log");
            Ok(streamed(driver.follow(&job_id, attempt, None), attempt))
        }
    }
}

fn streamed(chunks: BoxStream<'static, std::io::Result<Bytes>>, attempt: u32) -> Resp {
    let mut r = Response::new(StreamBody::new(chunks.map(|c| c.map(Frame::data))).boxed_unsync());
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer answers (nginx) pass this one on as it comes.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert("x-grid-attempt", HeaderValue::from(attempt));
    r
}
