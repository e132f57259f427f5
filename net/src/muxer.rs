//! Yamux over noise, with data frames sized to noise's frames.
//!
//! libp2p's yamux upgrade (`libp2p::yamux::Config`) keeps yamux's default of splitting data
//! into 16 KiB frames, and offers no way to change it. Yamux flushes its socket after every
//! frame, so each 16 KiB frame becomes a noise frame of its own: one seal, one `sendto`,
//! and on the other side one decryption, one buffer and one wake-up per 16 KiB. This upgrade
//! is the same muxer — the same `yamux` crate, the same `/yamux/1.0.0` on the wire, so it
//! speaks to any libp2p node — with one setting changed: a data frame carries up to
//! [`SPLIT_SEND_BYTES`], so that it and its header fill one noise frame. A bulk pull then
//! pays the per-frame costs a quarter as often.
//!
//! What the larger frame costs: another stream's frame may wait behind one of these
//! instead of a 16 KiB one, about 64 ms instead of 16 on a 1 MB/s link (yamux's reason for
//! its default, rust-yamux issue #100), and nothing on a LAN.

use std::collections::VecDeque;
use std::io;
use std::iter;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use futures::future::{self, Ready};
use futures::{AsyncRead, AsyncWrite};
use libp2p::core::muxing::{StreamMuxer, StreamMuxerEvent};
use libp2p::core::upgrade::{InboundConnectionUpgrade, OutboundConnectionUpgrade, UpgradeInfo};

/// The plaintext a noise frame carries (libp2p-noise: 65,535 bytes less 1,024 kept for
/// the tag and its own use).
pub const NOISE_FRAME_PLAINTEXT: usize = 65_535 - 1_024;
/// Yamux's frame header.
const YAMUX_HEADER: usize = 12;
/// The largest data frame this node sends: header and body fill one noise frame.
pub const SPLIT_SEND_BYTES: usize = NOISE_FRAME_PLAINTEXT - YAMUX_HEADER;

/// Inbound streams buffered while the swarm is not asking for them; one more is reset
/// (yamux's own ack backlog, so a current peer stops opening streams before this).
const INBOUND_BUFFERED_MAX: usize = 256;

/// The multiplexer upgrade, for `SwarmBuilder::with_tcp`.
#[derive(Debug, Clone)]
pub struct Config(yamux::Config);

impl Default for Config {
    fn default() -> Self {
        let mut config = yamux::Config::default();
        config.set_split_send_size(SPLIT_SEND_BYTES);
        Self(config)
    }
}

impl Config {
    /// Either end's upgrade: yamux over `io`, as the dialler (client) or the listener.
    fn connect<C>(self, io: C, mode: yamux::Mode) -> Ready<io::Result<Muxer<C>>>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        future::ready(Ok(Muxer::new(yamux::Connection::new(io, self.0, mode))))
    }
}

impl UpgradeInfo for Config {
    type Info = &'static str;
    type InfoIter = iter::Once<Self::Info>;

    fn protocol_info(&self) -> Self::InfoIter {
        iter::once("/yamux/1.0.0")
    }
}

impl<C> InboundConnectionUpgrade<C> for Config
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    type Output = Muxer<C>;
    type Error = io::Error;
    type Future = Ready<Result<Self::Output, Self::Error>>;

    fn upgrade_inbound(self, io: C, _: Self::Info) -> Self::Future {
        self.connect(io, yamux::Mode::Server)
    }
}

impl<C> OutboundConnectionUpgrade<C> for Config
where
    C: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    type Output = Muxer<C>;
    type Error = io::Error;
    type Future = Ready<Result<Self::Output, Self::Error>>;

    fn upgrade_outbound(self, io: C, _: Self::Info) -> Self::Future {
        self.connect(io, yamux::Mode::Client)
    }
}

/// One yamux connection, as libp2p's swarm drives a muxer.
#[derive(Debug)]
pub struct Muxer<C> {
    connection: yamux::Connection<C>,
    /// Yamux makes progress only while asked for its next inbound stream, and the swarm
    /// asks through [`StreamMuxer::poll`] as well as [`StreamMuxer::poll_inbound`]: a stream
    /// that arrives during `poll` waits here for `poll_inbound`.
    inbound: VecDeque<yamux::Stream>,
    inbound_waker: Option<Waker>,
}

impl<C> Muxer<C>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    fn new(connection: yamux::Connection<C>) -> Self {
        Self { connection, inbound: VecDeque::new(), inbound_waker: None }
    }

    fn next_inbound(&mut self, cx: &mut Context<'_>) -> Poll<Result<yamux::Stream, yamux::ConnectionError>> {
        match ready!(self.connection.poll_next_inbound(cx)) {
            Some(stream) => Poll::Ready(stream),
            None => Poll::Ready(Err(yamux::ConnectionError::Closed)),
        }
    }
}

impl<C> StreamMuxer for Muxer<C>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    type Substream = yamux::Stream;
    type Error = yamux::ConnectionError;

    fn poll_inbound(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        let this = self.get_mut();
        if let Some(stream) = this.inbound.pop_front() {
            return Poll::Ready(Ok(stream));
        }
        if let Poll::Ready(stream) = this.next_inbound(cx) {
            return Poll::Ready(stream);
        }
        this.inbound_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_outbound(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        self.get_mut().connection.poll_new_outbound(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.get_mut().connection.poll_close(cx)
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<StreamMuxerEvent, Self::Error>> {
        let this = self.get_mut();
        let stream = ready!(this.next_inbound(cx))?;
        if this.inbound.len() < INBOUND_BUFFERED_MAX {
            this.inbound.push_back(stream);
            if let Some(waker) = this.inbound_waker.take() {
                waker.wake();
            }
        } else {
            tracing::warn!(stream = %stream, "inbound stream reset: {INBOUND_BUFFERED_MAX} are waiting");
        }
        // Come back at once: the connection may have more to do.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::{AsyncReadExt, AsyncWriteExt};
    use libp2p::core::muxing::StreamMuxerExt;
    use libp2p::{identity, noise};

    use super::*;

    /// The TCP socket below noise, counting the flushes that follow more than a KiB of
    /// writes: one per noise frame of data sent (yamux flushes after every frame), leaving
    /// out the handshake and window updates.
    struct Counted {
        socket: libp2p::tcp::tokio::TcpStream,
        written: usize,
        sends: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.socket).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let written = ready!(Pin::new(&mut self.socket).poll_write(cx, buf))?;
            self.written += written;
            Poll::Ready(Ok(written))
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            ready!(Pin::new(&mut self.socket).poll_flush(cx))?;
            if std::mem::take(&mut self.written) > 1024 {
                self.sends.fetch_add(1, Ordering::Relaxed);
            }
            Poll::Ready(Ok(()))
        }

        fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.socket).poll_close(cx)
        }
    }

    /// Polls a muxer until its connection ends, as the swarm would.
    fn drive<M: StreamMuxer + Send + Unpin + 'static>(mut muxer: M) {
        tokio::spawn(future::poll_fn(move |cx| muxer.poll_unpin(cx).map(|_| ())));
    }

    const BYTES: usize = 1 << 20;

    /// Sends a MiB each way between this muxer (dialling) and libp2p's stock yamux
    /// (listening), over noise on a loopback socket; returns what each side's socket sent.
    async fn exchange() -> (usize, usize) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ours_sent, stock_sent) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counted = |socket, sends: &Arc<AtomicUsize>| Counted {
            socket: libp2p::tcp::tokio::TcpStream(socket),
            written: 0,
            sends: Arc::clone(sends),
        };
        let dialled = counted(tokio::net::TcpStream::connect(addr).await.unwrap(), &ours_sent);
        let accepted = counted(listener.accept().await.unwrap().0, &stock_sent);
        let (ours_key, stock_key) =
            (identity::Keypair::generate_ed25519(), identity::Keypair::generate_ed25519());
        let (ours, stock) = futures::join!(
            noise::Config::new(&ours_key).unwrap().upgrade_outbound(dialled, "/noise"),
            noise::Config::new(&stock_key).unwrap().upgrade_inbound(accepted, "/noise"),
        );
        let (ours, stock) = (ours.unwrap().1, stock.unwrap().1);
        let mut ours = Config::default().upgrade_outbound(ours, "/yamux/1.0.0").await.unwrap();
        let mut stock =
            libp2p::yamux::Config::default().upgrade_inbound(stock, "/yamux/1.0.0").await.unwrap();

        let payload: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
        let mut out = future::poll_fn(|cx| ours.poll_outbound_unpin(cx)).await.unwrap();
        drive(ours);
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            out.write_all(&sent).await.unwrap();
            out.flush().await.unwrap();
            let mut back = Vec::new();
            out.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut inbound = future::poll_fn(|cx| stock.poll_inbound_unpin(cx)).await.unwrap();
        drive(stock);
        let mut got = vec![0; BYTES];
        inbound.read_exact(&mut got).await.unwrap();
        assert!(got == payload, "the stock side read what this muxer sent");
        inbound.write_all(&got).await.unwrap();
        inbound.close().await.unwrap();
        assert!(writer.await.unwrap() == payload, "this muxer read what the stock side sent");
        (ours_sent.load(Ordering::Relaxed), stock_sent.load(Ordering::Relaxed))
    }

    #[tokio::test]
    async fn it_speaks_to_stock_yamux_in_a_third_as_many_frames() {
        let (ours, stock) = exchange().await;
        eprintln!("a MiB each way: {ours} sends of data from this muxer, {stock} from stock yamux");
        let full = BYTES.div_ceil(SPLIT_SEND_BYTES);
        // A frame is also cut where the stream's window runs out, so a few more than full.
        assert!((full..full + 6).contains(&ours), "a MiB in {ours} sends; {full} full frames expected");
        assert!(stock >= BYTES / (16 * 1024), "stock yamux: {stock} sends, one per 16 KiB");
        assert!(stock >= 3 * ours, "{ours} sends against stock yamux's {stock}");
    }
}
