//! The running components of `serve` and the order they start and stop in, derived from their
//! links (the OpenTelemetry Collector's graph `StartAll`/`ShutdownAll`).
//!
//! A component's links are the components it sends data to. Stopping goes from sources to
//! sinks: a component stops only once everything that sends to it has stopped, so whatever it
//! was handed before is drained downstream while its own destinations are still running.
//! Starting is the reverse: a component starts only once everything it sends to is running.

use std::future::Future;
use std::pin::Pin;

/// Waits for a started component to finish what it was given and stop.
pub(crate) type Stop = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

type Start = Box<dyn FnOnce() -> anyhow::Result<Stop> + Send>;

/// A component's name and the names of the components it sends data to.
pub(crate) type Links = (&'static str, &'static [&'static str]);

/// A graph that cannot be ordered: a mistake in the code that declares it, never in a config.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum GraphError {
    #[error("component {0:?} is declared twice")]
    Duplicate(&'static str),
    #[error("component {from:?} links to {to:?}, which is not a component")]
    UnknownLink {
        from: &'static str,
        to: &'static str,
    },
    #[error("the links between {0:?} form a cycle")]
    Cycle(Vec<&'static str>),
}

/// The order to stop `graph`'s components in: every component after all those that link to
/// it (Kahn's sort). Components with no link between them keep the order they are declared
/// in, so the order is the same on every run.
pub(crate) fn stop_order(graph: &[Links]) -> Result<Vec<&'static str>, GraphError> {
    let index = |name: &str| graph.iter().position(|(n, _)| *n == name);
    let mut senders = vec![0usize; graph.len()];
    for (i, (name, links)) in graph.iter().enumerate() {
        if index(name) != Some(i) {
            return Err(GraphError::Duplicate(name));
        }
        for to in *links {
            let j = index(to).ok_or(GraphError::UnknownLink { from: name, to })?;
            senders[j] += 1;
        }
    }
    let mut order = Vec::with_capacity(graph.len());
    let mut done = vec![false; graph.len()];
    while let Some(i) = (0..graph.len()).find(|&i| !done[i] && senders[i] == 0) {
        done[i] = true;
        let (name, links) = graph[i];
        order.push(name);
        for to in links {
            senders[index(to).expect("checked above")] -= 1;
        }
    }
    if order.len() < graph.len() {
        let left = graph
            .iter()
            .zip(&done)
            .filter(|(_, done)| !**done)
            .map(|((name, _), _)| *name)
            .collect();
        return Err(GraphError::Cycle(left));
    }
    Ok(order)
}

/// The components of a graph, each given how it starts, not started yet.
pub(crate) struct Topology {
    stop_order: Vec<&'static str>,
    starts: Vec<(&'static str, Start)>,
}

impl Topology {
    pub(crate) fn new(graph: &[Links]) -> Result<Topology, GraphError> {
        Ok(Topology {
            stop_order: stop_order(graph)?,
            starts: Vec::with_capacity(graph.len()),
        })
    }

    /// How `name` starts: it returns, without waiting, what stops it.
    pub(crate) fn provide(
        &mut self,
        name: &'static str,
        start: impl FnOnce() -> anyhow::Result<Stop> + Send + 'static,
    ) {
        assert!(
            self.stop_order.contains(&name),
            "component {name:?} is not in the graph"
        );
        self.starts.push((name, Box::new(start)));
    }

    /// Starts every component, sinks first.
    pub(crate) fn start_all(mut self) -> anyhow::Result<Running> {
        let mut stops = Vec::with_capacity(self.stop_order.len());
        for &name in self.stop_order.iter().rev() {
            let at = self
                .starts
                .iter()
                .position(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("component {name:?} was never provided"));
            let (_, start) = self.starts.swap_remove(at);
            stops.push((name, start()?));
        }
        stops.reverse();
        Ok(Running { stops })
    }
}

/// Started components, in the order they stop in.
pub(crate) struct Running {
    stops: Vec<(&'static str, Stop)>,
}

impl Running {
    /// Stops each component in turn, sources first; the first failure ends the shutdown.
    pub(crate) async fn stop_all(self) -> anyhow::Result<()> {
        for (name, stop) in self.stops {
            tracing::debug!(component = name, "stopping");
            stop.await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn sources_stop_before_what_they_send_to() {
        let graph: &[Links] = &[
            ("sink", &[]),
            ("source", &["middle"]),
            ("middle", &["sink"]),
        ];
        assert_eq!(stop_order(graph), Ok(vec!["source", "middle", "sink"]));
    }

    #[test]
    fn unlinked_components_keep_their_declared_order() {
        let graph: &[Links] = &[("b", &["c"]), ("a", &["c"]), ("c", &[])];
        assert_eq!(stop_order(graph), Ok(vec!["b", "a", "c"]));
    }

    #[test]
    fn a_cycle_is_refused() {
        let graph: &[Links] = &[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &[])];
        assert_eq!(
            stop_order(graph),
            Err(GraphError::Cycle(vec!["a", "b", "c"]))
        );
    }

    #[test]
    fn a_link_to_nothing_is_refused() {
        let graph: &[Links] = &[("a", &["nowhere"])];
        assert_eq!(
            stop_order(graph),
            Err(GraphError::UnknownLink {
                from: "a",
                to: "nowhere"
            })
        );
    }

    #[test]
    fn a_name_declared_twice_is_refused() {
        let graph: &[Links] = &[("a", &[]), ("a", &[])];
        assert_eq!(stop_order(graph), Err(GraphError::Duplicate("a")));
    }

    #[tokio::test]
    async fn components_start_sinks_first_and_stop_sources_first() {
        let graph: &[Links] = &[("source", &["sink"]), ("sink", &[])];
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut topology = Topology::new(graph).unwrap();
        for name in ["source", "sink"] {
            let log = Arc::clone(&log);
            topology.provide(name, move || {
                log.lock().unwrap().push(format!("start {name}"));
                Ok(Box::pin(async move {
                    log.lock().unwrap().push(format!("stop {name}"));
                    Ok(())
                }) as Stop)
            });
        }
        let running = topology.start_all().unwrap();
        running.stop_all().await.unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            ["start sink", "start source", "stop source", "stop sink"]
        );
    }
}
