//! The accept loop: hyper's HTTP/1 with a timer, so a connection has `header_read_timeout` to
//! send a request's headers (the timer also runs while a keep-alive connection sits idle, which
//! bounds idle connections); at most `max_connections` open connections (a connection beyond
//! them gets a 503 with `Retry-After` and is closed); graceful shutdown (no new connections,
//! in-flight requests finish).

use crate::error::{ApiError, RETRY_AFTER_SECS};
use crate::state::AppState;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long a refused connection is given to take its 503.
const REFUSE_WRITE: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` until `stop` completes, then waits for open connections to
/// finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    app: Arc<AppState>,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(app.cfg.max_connections.max(1)));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(app.cfg.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: not fatal.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            app.metrics
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(refuse(stream, app.cfg.max_connections));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let metrics_app = app.clone();
        metrics_app
            .metrics
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics_app
                .metrics
                .connections_open
                .fetch_sub(1, Ordering::Relaxed);
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection over the cap with a 503 and closes it.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = ApiError::overloaded(format!(
        "the server has {max} connections open, its limit; retry later"
    ))
    .body()
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Retry-After: {RETRY_AFTER_SECS}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(REFUSE_WRITE, write).await;
}
