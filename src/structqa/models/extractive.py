"""An encoder and a span head assembled into one module."""

from __future__ import annotations

from torch import nn

from structqa.encoders import entity_keys_if
from structqa.encoders.bert import BertEncoder
from structqa.features.batching import Batch
from structqa.heads.base import HeadOutput, SpanHead


class ExtractiveQAModel(nn.Module):
    def __init__(self, encoder: BertEncoder, head: SpanHead):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, batch: Batch, output_attentions: bool = False) -> HeadOutput:
        # token tags (data.token_tags) feed a POS-tag embedding and entity-aware attention
        with entity_keys_if(self.encoder, batch.entity_mask):
            out = self.encoder(
                batch.input_ids,
                batch.attention_mask,
                batch.token_type_ids,
                output_attentions=output_attentions,
                pos_tag_ids=batch.pos_tag_ids,
                **self.head.encoder_inputs(batch),
            )
        result = self.head(out.last_hidden_state, batch)
        result.attentions = out.attentions
        return result
