//! Ring connections that only ranks holding the shared secret can make.
//!
//! MLX's ring backend takes the first connection to a rank's port as its
//! neighbour: 4 KB of random bytes sent to rank 0's port once joined as
//! rank 1 and broke the group until every rank restarted. MLX has no hook
//! for a check, so with a secret ([`RingSecret`]) every ring connection goes
//! through this gate instead:
//!
//! - MLX listens and dials on loopback only: it reads a hostfile where this
//!   rank's addresses and its right neighbour's are local ports of the gate.
//! - The gate listens on this rank's real addresses. Each incoming
//!   connection must answer a challenge: both sides send a random nonce and
//!   prove the secret with an HMAC-SHA256 over both nonces (each side's
//!   proof names its role, so one cannot be replayed as the other). A peer
//!   that fails is refused with a log line, and the gate keeps waiting for
//!   the real one; the first that passes is joined to MLX's loopback port.
//! - MLX's connections to the right neighbour reach a local listener of the
//!   gate, which dials the neighbour's real address, proves the secret the
//!   same way, and joins the two.
//!
//! After the handshake the bytes pass through unchanged: the secret keeps
//! strangers out of the ring; it does not encrypt the traffic (use a
//! private link between the machines, as MLX advises for the ring anyway).
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::env::RankEnv;
use super::hostfile::Hostfile;
use crate::{Error, Result};

/// The environment variable holding the ring's shared secret.
pub const SECRET_VAR: &str = "VLM_RING_SECRET";

/// The shortest secret accepted: a guessable one would protect nothing.
const MIN_SECRET_BYTES: usize = 16;

/// How long a peer has to complete the handshake once connected.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once on one address (strangers beyond this
/// wait in the listen queue; each is cut after [`HANDSHAKE_TIMEOUT`]).
const MAX_HANDSHAKES: usize = 16;

/// First bytes of a handshake, so a peer of another version fails plainly.
const HELLO: &[u8; 16] = b"vlm-ring-gate/1\n";

/// Bytes copied per read when joining two connections.
const PIPE_BUFFER: usize = 256 * 1024;

/// The secret every rank of a ring shares.
#[derive(Clone)]
pub struct RingSecret(Arc<[u8]>);

impl std::fmt::Debug for RingSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingSecret(…)")
    }
}

impl RingSecret {
    /// A secret of at least 16 bytes.
    pub fn new(secret: &[u8]) -> Result<Self> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(Error::Distributed(format!(
                "the ring secret is {} bytes; at least {MIN_SECRET_BYTES} are needed (e.g. `openssl rand -hex 32`)",
                secret.len()
            )));
        }
        Ok(Self(secret.into()))
    }

    /// The secret in [`SECRET_VAR`], if set.
    pub fn from_process() -> Result<Option<Self>> {
        match std::env::var(SECRET_VAR) {
            Ok(s) => Self::new(s.trim().as_bytes()).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The secret in a file (its text, trimmed).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::new(text.trim().as_bytes())
    }

    fn proof(&self, role: &[u8], first: &[u8; 32], second: &[u8; 32]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(role);
        mac.update(first);
        mac.update(second);
        mac
    }
}

/// A rank's gate, open until the ring has formed.
pub struct RingGate {
    /// The hostfile MLX must read instead of the launcher's.
    mlx_hostfile: PathBuf,
}

impl RingGate {
    /// Opens the gate for `env`'s rank: listeners on its real addresses and
    /// loopback stand-ins for MLX. Peers have until `deadline` to connect.
    pub fn open(env: &RankEnv, secret: &RingSecret, deadline: Duration) -> Result<Self> {
        let until = Instant::now() + deadline;
        let mut mlx = env.hostfile.clone();
        // This rank: MLX listens on loopback ports; the gate on the real ones.
        for (slot, &public) in env.hostfile.ranks[env.rank].iter().enumerate() {
            let listener = TcpListener::bind(public).map_err(|e| {
                Error::Distributed(format!(
                    "rank {}: cannot listen on {public} ({e}): is that address this machine's?",
                    env.rank
                ))
            })?;
            let local = free_loopback_port()?;
            mlx.ranks[env.rank][slot] = local;
            let secret = secret.clone();
            thread::Builder::new()
                .name(format!("ring-gate-in-{slot}"))
                .spawn(move || admit_one(listener, local, &secret, until))
                .map_err(|e| Error::io("ring gate thread", e))?;
        }
        // The right neighbour: MLX dials a local listener of ours.
        let right = env.right();
        for (slot, &public) in env.hostfile.ranks[right].iter().enumerate() {
            let listener =
                TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("ring gate listener", e))?;
            mlx.ranks[right][slot] =
                listener.local_addr().map_err(|e| Error::io("ring gate listener", e))?;
            let secret = secret.clone();
            thread::Builder::new()
                .name(format!("ring-gate-out-{slot}"))
                .spawn(move || {
                    if let Err(e) = dial_one(listener, public, &secret, until) {
                        tracing::error!(peer = %public, error = %e, "the ring could not reach its right neighbour");
                    }
                })
                .map_err(|e| Error::io("ring gate thread", e))?;
        }
        let mlx_hostfile = std::env::temp_dir().join(format!(
            "vlm-ring-gate-{}-{}.json",
            std::process::id(),
            env.rank
        ));
        mlx.write(&mlx_hostfile)?;
        Ok(Self { mlx_hostfile })
    }

    /// The hostfile to point `MLX_HOSTFILE` at while MLX joins.
    pub fn mlx_hostfile(&self) -> &Path {
        &self.mlx_hostfile
    }
}

impl Drop for RingGate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.mlx_hostfile);
    }
}

/// Whether every address of the ring is on this machine (then nobody
/// outside it can reach the ports, secret or not).
pub fn is_loopback_only(hostfile: &Hostfile) -> bool {
    hostfile.ranks.iter().flatten().all(|a| a.ip().is_loopback())
}

fn free_loopback_port() -> Result<SocketAddr> {
    // MLX binds it right after (with SO_REUSEADDR): see `Hostfile::local`
    // for why a lost race is harmless.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Distributed(format!("no free loopback port for the ring gate: {e}")))
}

/// Waits on `listener` for the first peer that proves the secret and joins
/// it to MLX's port `local`; strangers are refused and logged.
fn admit_one(listener: TcpListener, local: SocketAddr, secret: &RingSecret, until: Instant) {
    let admitted = Arc::new(AtomicBool::new(false));
    let in_progress = Arc::new(AtomicUsize::new(0));
    let (winner_tx, winner_rx) = std::sync::mpsc::channel::<TcpStream>();
    let _ = listener.set_nonblocking(true);
    while !admitted.load(Ordering::SeqCst) && Instant::now() < until {
        if let Ok(peer) = winner_rx.try_recv() {
            admitted.store(true, Ordering::SeqCst);
            drop(listener);
            match connect_until(local, until) {
                Ok(mlx) => join(peer, mlx),
                Err(e) => {
                    tracing::error!(error = %e, "the ring gate could not reach MLX's own port")
                }
            }
            return;
        }
        let (stream, from) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "ring gate: accept failed");
                continue;
            }
        };
        // An accepted socket inherits the listener's non-blocking mode on
        // macOS (not on Linux): the handshake and the pipe block.
        let _ = stream.set_nonblocking(false);
        if in_progress.load(Ordering::SeqCst) >= MAX_HANDSHAKES {
            tracing::warn!(%from, "ring gate: too many handshakes at once; connection dropped");
            continue;
        }
        in_progress.fetch_add(1, Ordering::SeqCst);
        let (secret, winner_tx, in_progress) =
            (secret.clone(), winner_tx.clone(), in_progress.clone());
        let _ = thread::Builder::new().name("ring-gate-handshake".into()).spawn(move || {
            match accept_handshake(&stream, &secret) {
                Ok(()) => {
                    tracing::info!(%from, "ring peer proved the shared secret");
                    let _ = winner_tx.send(stream);
                }
                Err(why) => {
                    tracing::warn!(%from, %why, "ring gate refused an unauthenticated peer")
                }
            }
            in_progress.fetch_sub(1, Ordering::SeqCst);
        });
    }
    if !admitted.load(Ordering::SeqCst) {
        tracing::warn!("ring gate: no peer proved the secret in time");
    }
}

/// Takes MLX's connection on `listener`, reaches the neighbour at `public`
/// (retrying until `until`: it may still be starting), proves the secret
/// and joins the two.
fn dial_one(
    listener: TcpListener,
    public: SocketAddr,
    secret: &RingSecret,
    until: Instant,
) -> Result<()> {
    let (mlx, _) = listener.accept().map_err(|e| Error::io("ring gate listener", e))?;
    loop {
        let peer = connect_until(public, until)?;
        match dial_handshake(&peer, secret) {
            Ok(()) => {
                join(mlx, peer);
                return Ok(());
            }
            // The peer spoke but did not prove the secret: another secret,
            // or not a rank at all. Nothing to retry.
            Err(HandshakeError::Refused(why)) => {
                let _ = mlx.shutdown(Shutdown::Both);
                return Err(Error::Distributed(format!(
                    "{public} did not prove the ring's shared secret: {why}"
                )));
            }
            Err(HandshakeError::Io(e)) if Instant::now() < until => {
                tracing::debug!(peer = %public, error = %e, "ring handshake cut; retrying");
                thread::sleep(Duration::from_millis(200));
            }
            Err(HandshakeError::Io(e)) => {
                return Err(Error::Distributed(format!("handshake with {public}: {e}")))
            }
        }
    }
}

fn connect_until(addr: SocketAddr, until: Instant) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if Instant::now() >= until => {
                return Err(Error::Distributed(format!("cannot connect to {addr}: {e}")))
            }
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[derive(Debug)]
enum HandshakeError {
    /// The connection failed or was cut.
    Io(std::io::Error),
    /// The other side answered, wrongly.
    Refused(&'static str),
}

impl From<std::io::Error> for HandshakeError {
    fn from(e: std::io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "{e}"),
            HandshakeError::Refused(why) => f.write_str(why),
        }
    }
}

/// The listening side: hello and nonce out; the dialer's nonce and proof
/// in, checked; our proof out.
fn accept_handshake(
    mut stream: &TcpStream,
    secret: &RingSecret,
) -> std::result::Result<(), HandshakeError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let ours = nonce()?;
    stream.write_all(HELLO)?;
    stream.write_all(&ours)?;
    let mut hello = [0u8; 16];
    stream.read_exact(&mut hello)?;
    if &hello != HELLO {
        return Err(HandshakeError::Refused("it did not greet as a ring gate"));
    }
    let (mut theirs, mut proof) = ([0u8; 32], [0u8; 32]);
    stream.read_exact(&mut theirs)?;
    stream.read_exact(&mut proof)?;
    secret
        .proof(b"dialer", &ours, &theirs)
        .verify_slice(&proof)
        .map_err(|_| HandshakeError::Refused("its proof of the secret is wrong"))?;
    stream.write_all(&secret.proof(b"listener", &theirs, &ours).finalize().into_bytes())?;
    clear_timeouts(stream)
}

/// The dialing side: the listener's hello and nonce in; our nonce and proof
/// out; the listener's proof in, checked.
fn dial_handshake(
    mut stream: &TcpStream,
    secret: &RingSecret,
) -> std::result::Result<(), HandshakeError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hello = [0u8; 16];
    stream.read_exact(&mut hello)?;
    if &hello != HELLO {
        return Err(HandshakeError::Refused(
            "it did not greet as a ring gate (is VLM_RING_SECRET set on every rank?)",
        ));
    }
    let mut theirs = [0u8; 32];
    stream.read_exact(&mut theirs)?;
    let ours = nonce()?;
    stream.write_all(HELLO)?;
    stream.write_all(&ours)?;
    stream.write_all(&secret.proof(b"dialer", &theirs, &ours).finalize().into_bytes())?;
    let mut proof = [0u8; 32];
    stream.read_exact(&mut proof)?;
    secret.proof(b"listener", &ours, &theirs).verify_slice(&proof).map_err(|_| {
        HandshakeError::Refused("its proof of the secret is wrong (another secret?)")
    })?;
    clear_timeouts(stream)
}

fn clear_timeouts(stream: &TcpStream) -> std::result::Result<(), HandshakeError> {
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(None)?;
    Ok(())
}

fn nonce() -> std::io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(std::io::Error::other)?;
    Ok(n)
}

/// Copies bytes both ways until either side closes.
fn join(a: TcpStream, b: TcpStream) {
    let _ = (a.set_nodelay(true), b.set_nodelay(true));
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        tracing::error!("ring gate: cannot share a connection between two threads");
        return;
    };
    let _ = thread::Builder::new().name("ring-pipe".into()).spawn(move || copy(a, b));
    let _ = thread::Builder::new().name("ring-pipe".into()).spawn(move || copy(b2, a2));
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = vec![0u8; PIPE_BUFFER];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    // Either side gone: the other learns it at once (MLX then reports the
    // lost peer, as it would without the gate).
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let dialer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener.accept().unwrap().0, dialer)
    }

    #[test]
    fn the_same_secret_passes_both_ways_and_another_is_refused_by_both() {
        let secret = RingSecret::new(b"0123456789abcdef-one").unwrap();
        let (listening, dialing) = pair();
        let s = secret.clone();
        let listener =
            thread::spawn(move || accept_handshake(&listening, &s).map_err(|e| e.to_string()));
        assert!(dial_handshake(&dialing, &secret).is_ok());
        assert!(listener.join().unwrap().is_ok());

        let other = RingSecret::new(b"0123456789abcdef-two").unwrap();
        let (listening, dialing) = pair();
        let listener =
            thread::spawn(move || accept_handshake(&listening, &secret).map_err(|e| e.to_string()));
        // The dialer sends its (wrong) proof, then waits for the listener's,
        // which never comes: the listener closed the connection.
        assert!(dial_handshake(&dialing, &other).is_err());
        let refused = listener.join().unwrap().unwrap_err();
        assert!(refused.contains("proof of the secret is wrong"), "{refused}");
    }

    #[test]
    fn random_bytes_are_refused_and_a_short_secret_is_not_taken() {
        let secret = RingSecret::new(&[7u8; 32]).unwrap();
        let (listening, mut stranger) = pair();
        let listener =
            thread::spawn(move || accept_handshake(&listening, &secret).map_err(|e| e.to_string()));
        let junk: Vec<u8> =
            (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let _ = stranger.write_all(&junk);
        let refused = listener.join().unwrap().unwrap_err();
        assert!(refused.contains("did not greet"), "{refused}");
        let short = RingSecret::new(b"hunter2").unwrap_err().to_string();
        assert!(short.contains("at least 16"), "{short}");
    }
}
