//! The accept loop: HTTP/1.1 through hyper, with what a server meeting
//! careless or hostile clients needs and `axum::serve` does not offer:
//!
//! - a header-read timeout: a connection that does not send a complete
//!   request header in time — a new one, or a kept-alive one between requests
//!   (hyper restarts the timer after each response) — is closed;
//! - a connection limit, where the oldest connection that has not sent a
//!   request yet is closed to make room, so idle connections cannot lock real
//!   clients (or `/health`) out, nor exhaust the process's open files;
//! - graceful shutdown: stop accepting, let every connection finish the
//!   request it is answering, then return.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify};

pub(crate) struct Limits {
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `stop` fires (or its sender is dropped),
/// then closes the listening socket (and says so on `closed`, so the port can
/// be bound again at once) and waits for the open connections to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: oneshot::Receiver<()>,
    closed: oneshot::Sender<()>,
) {
    let connections = Arc::new(Connections::new());
    let (shutdown, _) = watch::channel(false);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.idle_timeout).keep_alive(true);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = connections.make_room(limits.max_connections) => {}
        }
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        spawn_connection(
            stream,
            app.clone(),
            http.clone(),
            connections.clone(),
            shutdown.subscribe(),
        );
    }
    drop(listener);
    let _ = closed.send(());
    shutdown.send_replace(true);
    let mut open = connections.count.subscribe();
    let _ = open.wait_for(|n| *n == 0).await;
}

fn spawn_connection(
    stream: TcpStream,
    app: Router,
    http: http1::Builder,
    connections: Arc<Connections>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Streamed tokens are small writes: send each at once.
    let _ = stream.set_nodelay(true);
    let (id, used, close) = connections.add();
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request| {
        used.store(true, Ordering::Relaxed);
        app.call(request)
    });
    tokio::spawn(async move {
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            }
            _ = close.notified() => tracing::debug!("closed a connection that sent no request, to make room"),
            _ = async { shutdown.wait_for(|stop| *stop).await.is_ok() } => {
                // Finishes the response under way (a stream ends when the
                // engine stops), then closes.
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            }
        }
        connections.remove(id);
    });
}

/// Errors of one connection (reset before accept) are nothing; others (out of
/// open files) are worth a log line and a pause, or the loop would spin.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted) {
        return;
    }
    tracing::error!(error = %e, "cannot accept a connection");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// One open connection, as the limit sees it.
struct Open {
    id: u64,
    /// It has sent a complete request header.
    used: Arc<AtomicBool>,
    /// Notified to close it at once.
    close: Arc<Notify>,
    closing: bool,
}

/// The open connections, oldest first.
struct Connections {
    open: Mutex<Vec<Open>>,
    next_id: AtomicU64,
    count: watch::Sender<usize>,
}

impl Connections {
    fn new() -> Self {
        Self {
            open: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            count: watch::channel(0).0,
        }
    }

    fn add(&self) -> (u64, Arc<AtomicBool>, Arc<Notify>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (used, close) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.push(Open { id, used: used.clone(), close: close.clone(), closing: false });
        self.count.send_replace(open.len());
        (id, used, close)
    }

    fn remove(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|c| c.id != id);
        self.count.send_replace(open.len());
    }

    /// Returns once fewer than `max` connections are open: closes the oldest
    /// one that has sent no request, or waits for one to end.
    async fn make_room(&self, max: usize) {
        let mut count = self.count.subscribe();
        while *count.borrow_and_update() >= max {
            self.close_oldest_unused();
            let _ = count.changed().await;
        }
    }

    fn close_oldest_unused(&self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(idle) = open.iter_mut().find(|c| !c.closing && !c.used.load(Ordering::Relaxed))
        {
            idle.closing = true;
            // `notify_one` keeps the wake-up if the task is not waiting yet.
            idle.close.notify_one();
        }
    }
}
