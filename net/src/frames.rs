//! Length-prefixed frames on a raw stream (`/murmur/model/1`): a 4-byte big-endian length,
//! then that many bytes. A frame longer than the reader's bound is refused before any of
//! it is read.

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Writes one frame (and flushes it).
pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a frame is at most 4 GiB"))?;
    writer.write_all(&len.to_be_bytes()).await?;
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// Reads one frame of at most `len_max` bytes; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    len_max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(prefix) as usize;
    if len > len_max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the limit of {len_max}"),
        ));
    }
    let mut bytes = vec![0u8; len];
    reader.read_exact(&mut bytes).await?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused_unread() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").await.unwrap();
        write_frame(&mut wire, &[]).await.unwrap();
        let mut reader = futures::io::Cursor::new(wire.clone());
        assert_eq!(read_frame(&mut reader, 16).await.unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut reader, 16).await.unwrap().unwrap(), b"");
        assert_eq!(read_frame(&mut reader, 16).await.unwrap(), None, "a clean end");
        let mut reader = futures::io::Cursor::new(wire);
        assert!(
            read_frame(&mut reader, 4).await.unwrap_err().to_string().contains("more than the limit of 4")
        );
        let mut cut = futures::io::Cursor::new(vec![0, 0, 0, 9, b'x']);
        assert!(read_frame(&mut cut, 16).await.is_err(), "a frame cut short is an error, not an end");
    }
}
