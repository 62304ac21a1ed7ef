"""The lab: experiments kept as a record, outside the product (see lab/README.md)."""
