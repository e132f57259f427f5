//! The encrypted pipe: what any encrypted, verified pull must do to each byte, done by the
//! shortest code we can write, with none of libp2p, yamux, CBOR or the scheduler. One
//! thread reads the file straight into noise-sized frames (at most 65,535 bytes with the
//! 16-byte tag, behind a 2-byte length, as noise frames them), seals them in place and
//! sends them over a loopback TCP connection; another receives each frame straight into
//! its place in a 1 MiB chunk, opens it in place, hashes the chunk, writes it to the
//! destination file, and has it flushed in the background every 64 MiB and fsynced at the
//! end, as a pull does. Next to the pull, it shows how much of the time is the work itself
//! on this machine and how much is the stack around it.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context;
use ring::aead::{AES_256_GCM, Aad, Algorithm, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// The largest noise frame, tag included.
const FRAME_MAX: usize = 65_535;
const TAG: usize = 16;
const CHUNK: usize = 1 << 20;
const FLUSH_EVERY: u64 = 64 << 20;

/// The pipe's cipher.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cipher {
    /// What noise (and libp2p's TLS, which lists it first) negotiates.
    ChaCha20Poly1305,
    /// What this CPU seals fastest when it has AES instructions.
    Aes256Gcm,
}

impl Cipher {
    fn algorithm(self) -> &'static Algorithm {
        match self {
            Self::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Self::Aes256Gcm => &AES_256_GCM,
        }
    }
}

/// Noise's ChaCha20-Poly1305 nonce: four zero bytes, then the frame counter in little
/// endian (used for AES-GCM too: the layout costs nothing either way).
fn nonce(counter: &mut u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&counter.to_le_bytes());
    *counter += 1;
    Nonce::assume_unique_for_key(bytes)
}

fn key(cipher: Cipher) -> anyhow::Result<LessSafeKey> {
    let algorithm = cipher.algorithm();
    let unbound = UnboundKey::new(algorithm, &vec![0x5a; algorithm.key_len()])
        .map_err(|_| anyhow::anyhow!("bad key length"))?;
    Ok(LessSafeKey::new(unbound))
}

/// Reads `source` chunk by chunk into frames, seals them and sends them.
fn send(source: &File, size: u64, mut socket: TcpStream, cipher: Cipher) -> anyhow::Result<()> {
    let key = key(cipher)?;
    let mut counter = 0;
    let mut out = vec![0u8; CHUNK + CHUNK.div_ceil(FRAME_MAX - TAG) * (2 + TAG)];
    let mut offset = 0u64;
    while offset < size {
        let chunk = usize::try_from((size - offset).min(CHUNK as u64))?;
        let (mut at, mut taken) = (0, 0);
        while taken < chunk {
            let len = (chunk - taken).min(FRAME_MAX - TAG);
            out[at..at + 2].copy_from_slice(&u16::try_from(len + TAG)?.to_be_bytes());
            let body = &mut out[at + 2..at + 2 + len];
            source.read_exact_at(body, offset + taken as u64)?;
            let tag = key
                .seal_in_place_separate_tag(nonce(&mut counter), Aad::empty(), body)
                .map_err(|_| anyhow::anyhow!("seal failed"))?;
            out[at + 2 + len..at + 2 + len + TAG].copy_from_slice(tag.as_ref());
            at += 2 + len + TAG;
            taken += len;
        }
        socket.write_all(&out[..at])?;
        offset += chunk as u64;
    }
    Ok(())
}

/// Receives and opens `size` bytes; a second thread hashes and writes them to `dest`
/// (as a pull checks chunks off its network task). Returns their SHA-256.
fn receive(mut socket: TcpStream, size: u64, dest: &File, cipher: Cipher) -> anyhow::Result<[u8; 32]> {
    let key = key(cipher)?;
    let mut counter = 0;
    // Two chunk buffers go round: one being filled, one being hashed and written.
    let (full_tx, full_rx) = mpsc::sync_channel::<(Vec<u8>, usize, u64)>(1);
    let (empty_tx, empty_rx) = mpsc::sync_channel::<Vec<u8>>(2);
    for _ in 0..2 {
        empty_tx.send(vec![0u8; CHUNK + FRAME_MAX])?;
    }
    let writer_dest = dest.try_clone()?;
    let writer = std::thread::spawn(move || -> anyhow::Result<[u8; 32]> {
        let mut hash = Sha256::new();
        let (flushes, flusher) = flusher(writer_dest.try_clone()?);
        let mut unflushed = 0u64;
        for (buf, len, offset) in full_rx {
            hash.update(&buf[..len]);
            writer_dest.write_all_at(&buf[..len], offset)?;
            unflushed += len as u64;
            if unflushed >= FLUSH_EVERY {
                unflushed = 0;
                // At most one flush waiting behind the running one, as in a pull.
                let _ = flushes.try_send(());
            }
            let _ = empty_tx.send(buf);
        }
        drop(flushes);
        flusher.join().map_err(|_| anyhow::anyhow!("the flusher panicked"))??;
        Ok(hash.finalize().into())
    });
    let mut feed = || -> anyhow::Result<()> {
        let mut offset = 0u64;
        while offset < size {
            let chunk = usize::try_from((size - offset).min(CHUNK as u64))?;
            let mut buf = empty_rx.recv()?;
            let mut filled = 0;
            while filled < chunk {
                let mut len = [0u8; 2];
                socket.read_exact(&mut len)?;
                let len = usize::from(u16::from_be_bytes(len));
                anyhow::ensure!(len > TAG && filled + len - TAG <= chunk, "a frame crosses its chunk");
                let frame = &mut buf[filled..filled + len];
                socket.read_exact(frame)?;
                key.open_in_place(nonce(&mut counter), Aad::empty(), frame)
                    .map_err(|_| anyhow::anyhow!("a frame does not open"))?;
                filled += len - TAG;
            }
            full_tx.send((buf, chunk, offset))?;
            offset += chunk as u64;
        }
        Ok(())
    };
    let fed = feed();
    drop(full_tx);
    // The writer's error first: when it stops, feeding fails only with a closed channel.
    let digest = writer.join().map_err(|_| anyhow::anyhow!("the writer panicked"))?.context("writing")?;
    fed?;
    dest.sync_all()?;
    Ok(digest)
}

/// A thread that flushes `file` each time it is asked to.
fn flusher(file: File) -> (mpsc::SyncSender<()>, std::thread::JoinHandle<std::io::Result<()>>) {
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let thread = std::thread::spawn(move || {
        for () in rx {
            file.sync_data()?;
        }
        Ok(())
    });
    (tx, thread)
}

/// Pipes `source` into a new file in `dir`; MB/s. Fails unless the bytes that arrived
/// hash to `expected`.
pub fn run(source: &Path, dir: &Path, expected: &[u8; 32], cipher: Cipher) -> anyhow::Result<f64> {
    let size = std::fs::metadata(source)?.len();
    let file = File::open(source)?;
    let dest_path = dir.join("piped");
    let dest = File::create(&dest_path)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let started = Instant::now();
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        let socket = TcpStream::connect(addr)?;
        socket.set_nodelay(true)?;
        send(&file, size, socket, cipher)
    });
    let (socket, _) = listener.accept()?;
    let received = receive(socket, size, &dest, cipher);
    let elapsed = started.elapsed();
    // The receiver's error first: a sender that fails because the receiver gave up only
    // reports a broken pipe.
    let sent = sender.join().map_err(|_| anyhow::anyhow!("the sender panicked"))?;
    let digest = received.context("receiving")?;
    sent.context("sending")?;
    std::fs::remove_file(&dest_path)?;
    anyhow::ensure!(&digest == expected, "the piped bytes do not hash to the source's digest");
    Ok(size as f64 / 1e6 / elapsed.as_secs_f64())
}
