//! MLX's ring hostfile: a JSON list with one entry per rank, each entry the
//! `"ip:port"` addresses that rank listens on (one per connection), e.g.
//! `[["127.0.0.1:5000"], ["127.0.0.1:5001"]]`. `mlx.launch --backend ring`
//! writes exactly this to a temporary file and points `MLX_HOSTFILE` at it;
//! we read the same format so either launcher can start our ranks.
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use crate::{Error, Result};

/// The addresses of every rank of a ring, rank 0 first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostfile {
    /// `ranks[r]`: the addresses rank `r` accepts its left neighbour on.
    pub ranks: Vec<Vec<SocketAddr>>,
}

impl Hostfile {
    /// `size` ranks on this machine, one free loopback port each.
    ///
    /// The ports are found by binding port 0 and letting the listeners go
    /// again, so another program could take one before MLX binds it; on a
    /// test machine that window is milliseconds wide and a lost race shows
    /// as a clear "couldn't bind" from MLX, not as a hang.
    pub fn local(size: usize) -> Result<Hostfile> {
        if size == 0 {
            return Err(Error::Distributed("a ring needs at least one rank".into()));
        }
        // Hold every listener until all ports are chosen so the OS hands out
        // distinct ones.
        let listeners = (0..size)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::Distributed(format!("no free loopback port for the ring: {e}")))?;
        let ranks = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| vec![a]))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::Distributed(format!("no free loopback port for the ring: {e}")))?;
        Ok(Hostfile { ranks })
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The text MLX reads.
    pub fn to_json(&self) -> String {
        let ranks: Vec<Vec<String>> =
            self.ranks.iter().map(|r| r.iter().map(|a| a.to_string()).collect()).collect();
        serde_json::to_string(&ranks).expect("a list of lists of strings serializes")
    }

    /// Parses MLX's ring format. IPs only: MLX's ring backend does not resolve
    /// host names, so a name here would fail later and less clearly.
    pub fn parse(text: &str) -> Result<Hostfile> {
        let bad = |why: String| Error::Distributed(format!("invalid ring hostfile: {why}"));
        let ranks: Vec<Vec<String>> = serde_json::from_str(text).map_err(|e| {
            bad(format!("{e} (expected a JSON list of lists of \"ip:port\", one list per rank)"))
        })?;
        if ranks.is_empty() {
            return Err(bad("it lists no ranks".into()));
        }
        let ranks = ranks
            .into_iter()
            .enumerate()
            .map(|(rank, addrs)| {
                if addrs.is_empty() {
                    return Err(bad(format!("rank {rank} has no address")));
                }
                addrs
                    .iter()
                    .map(|a| {
                        a.parse::<SocketAddr>()
                            .map_err(|e| bad(format!("rank {rank}: {a:?} is not ip:port ({e})")))
                    })
                    .collect()
            })
            .collect::<Result<Vec<Vec<SocketAddr>>>>()?;
        // MLX's ring pairs connection i of a rank with connection i of its
        // neighbours: unequal counts fail inside MLX after connecting.
        let n = ranks[0].len();
        if let Some(r) = ranks.iter().position(|a| a.len() != n) {
            return Err(bad(format!(
                "rank {r} has {} addresses, rank 0 has {n}: every rank needs the same number",
                ranks[r].len()
            )));
        }
        Ok(Hostfile { ranks })
    }

    /// Reads and parses a hostfile.
    pub fn read(path: &Path) -> Result<Hostfile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Hostfile::parse(&text).map_err(|e| Error::Distributed(format!("{}: {e}", path.display())))
    }

    /// Writes the file MLX reads.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_json()).map_err(|e| Error::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ports_are_distinct_and_round_trip_through_mlx_format() {
        let h = Hostfile::local(3).unwrap();
        assert_eq!(h.size(), 3);
        let ports: std::collections::HashSet<u16> = h.ranks.iter().map(|r| r[0].port()).collect();
        assert_eq!(ports.len(), 3, "{h:?}");
        assert!(h.ranks.iter().all(|r| r[0].ip().is_loopback()));
        assert_eq!(Hostfile::parse(&h.to_json()).unwrap(), h);
    }

    #[test]
    fn reads_what_mlx_launch_writes_and_refuses_what_mlx_could_not_use() {
        // mlx.launch's launch_ring: json.dumps([[f"{ip}:{port}", ...], ...])
        let h = Hostfile::parse(
            r#"[["10.0.0.1:5000", "10.0.0.1:5001"], ["10.0.0.2:5002", "10.0.0.2:5003"]]"#,
        )
        .unwrap();
        assert_eq!(h.size(), 2);
        assert_eq!(h.ranks[1][1], "10.0.0.2:5003".parse().unwrap());
        for (text, why) in [
            ("[]", "no ranks"),
            (r#"[["mac-studio.local:5000"]]"#, "not ip:port"),
            (r#"[["10.0.0.1:5000"], []]"#, "rank 1 has no address"),
            (r#"[["10.0.0.1:5000"], ["10.0.0.2:1", "10.0.0.2:2"]]"#, "same number"),
            (r#"{"hosts": []}"#, "list of lists"),
        ] {
            let err = Hostfile::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
