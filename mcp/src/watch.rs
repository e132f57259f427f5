//! Watches of a server's resource list or of one resource: the state now, then the state
//! after each change the server notifies, across restarts of the server (a new connection
//! subscribes again and reads again, so a change made while it was down is not missed).
//! A state equal to the last one delivered is not delivered again; a burst of changes is
//! read once.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use crate::server::{Change, Connection, Server};
use crate::{ResourceContent, ResourceInfo};

/// What a watch delivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    List(Vec<ResourceInfo>),
    Content(ResourceContent),
}

/// An open watch; dropping it ends it.
#[derive(Debug)]
pub struct Watch {
    events: mpsc::Receiver<Result<WatchEvent, String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// The next state, or why the watch ended (the server was stopped, or the resource
    /// cannot be read).
    pub async fn next(&mut self) -> Result<WatchEvent, String> {
        self.events.recv().await.unwrap_or_else(|| Err("the watch ended".into()))
    }
}

impl Server {
    /// Watches the resource list.
    #[must_use]
    pub fn watch_list(self: &Arc<Self>) -> Watch {
        self.watch(None)
    }

    /// Watches resource `uri`.
    #[must_use]
    pub fn watch_resource(self: &Arc<Self>, uri: &str) -> Watch {
        self.watch(Some(uri.to_owned()))
    }

    fn watch(self: &Arc<Self>, uri: Option<String>) -> Watch {
        // One state in hand at a time: the reader paces the reads.
        let (sender, events) = mpsc::channel(1);
        let task = tokio::spawn(run(self.clone(), uri, sender));
        Watch { events, task }
    }

    async fn state(&self, uri: Option<&str>) -> Result<WatchEvent, String> {
        match uri {
            None => self.resources().await.map(WatchEvent::List),
            Some(uri) => self.read(uri).await.map(WatchEvent::Content),
        }
    }
}

async fn run(server: Arc<Server>, uri: Option<String>, events: mpsc::Sender<Result<WatchEvent, String>>) {
    let mut last: Option<WatchEvent> = None;
    loop {
        let Some(connection) = server.up().await else {
            let _ = events.send(Err(format!("MCP server `{}` was stopped", server.name()))).await;
            return;
        };
        // Subscribed before reading: a change between the read and the subscription
        // would otherwise be lost.
        let mut changes = server.changes.subscribe();
        if let Some(uri) = &uri
            && let Err(error) = server.subscribe(&connection, uri).await
        {
            tracing::warn!(server = %server.name(), %uri, %error, "resource watch without change notices");
        }
        if !deliver(&server, uri.as_deref(), &connection, &events, &mut last).await {
            return;
        }
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(change) if !concerns(&change, uri.as_deref()) => continue,
                    // Lagged: changes were missed; reading now covers them.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        while changes.try_recv().is_ok() {}
                        if !deliver(&server, uri.as_deref(), &connection, &events, &mut last).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = server.replaced(connection.generation) => break,
                () = events.closed() => return,
            }
        }
    }
}

fn concerns(change: &Change, uri: Option<&str>) -> bool {
    match (change, uri) {
        (Change::ListChanged, None) => true,
        (Change::Updated(changed), Some(uri)) => changed == uri,
        _ => false,
    }
}

/// Reads the state and hands it on if it changed; false when the watch is over (the
/// reader left, or the state cannot be read while the connection lives).
async fn deliver(
    server: &Server,
    uri: Option<&str>,
    connection: &Connection,
    events: &mpsc::Sender<Result<WatchEvent, String>>,
    last: &mut Option<WatchEvent>,
) -> bool {
    match server.state(uri).await {
        Ok(state) if last.as_ref() == Some(&state) => true,
        Ok(state) => {
            *last = Some(state.clone());
            events.send(Ok(state)).await.is_ok()
        }
        // The connection went away mid-read: the next one reads again.
        Err(_) if server.connected().await.map(|c| c.generation) != Ok(connection.generation) => true,
        Err(error) => {
            let _ = events.send(Err(error)).await;
            false
        }
    }
}
