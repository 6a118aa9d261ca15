use prost::Message;
use tonic::codec::{EncodeBuf, Encoder};
use tonic::Status;

/// Encodes the protobuf answer of a method served by hand (the trace service, the decision
/// service): what tonic's own codec would do, shared by both.
pub struct ResponseEncoder<T>(std::marker::PhantomData<T>);

impl<T> Default for ResponseEncoder<T> {
    fn default() -> Self {
        ResponseEncoder(std::marker::PhantomData)
    }
}

impl<T: Message> Encoder for ResponseEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("cannot encode response: {e}")))
    }
}
